"""`ModelSpec`: the shape of a decoder-only LLM, parsed from a Hugging Face config.json.

Memory accounting (what `weight_bytes_per_rank` and `kv_bytes_per_token_per_rank` assume):

- Attention (q, o) splits by attention TP; k/v heads per rank = max(1, kv_heads // tp) (vLLM
  replicates KV heads when tp > kv_heads). MLA's q_a/kv_a down-projections are replicated.
  Attention is replicated across attention-DP ranks.
- Dense MLP and shared experts split by tp; routed experts split by ffn_tp * ep
  (ceil(E / ep) local experts, intermediate ceil(I / ffn_tp)).
- Embedding and LM head: vocab padded to a multiple of 64 (vLLM DEFAULT_VOCAB_PADDING_SIZE),
  vocab-parallel split by tp. Embedding on the first pp stage, LM head + final norm on the last;
  tied embeddings count once when both sit on one stage (pp == 1), twice otherwise.
- Embeddings, LM head, norms and routers are bf16 (2 bytes) whatever the quantization;
  biases, attention sinks, q/k norms and MTP (`num_nextn_predict_layers`) layers are not counted (<0.3%).
- Kernel padding is not modelled (e.g. vLLM's MXFP4 Marlin/TRT-LLM MoE backends round hidden up
  to 256 and the per-rank intermediate up to 128: +9% expert bytes for gpt-oss).
- pp stages follow vLLM `get_pp_indices`; the worst (largest) stage is reported.
- Gated DeltaNet layers (Qwen3.5 / Qwen3-Next "linear_attention"): in_proj_qkvz, in_proj_ba and
  out_proj split by tp (the quantization part "linear_attention"), the conv1d, A_log, dt_bias and
  the gated norm in bf16; full-attention layers with `attn_output_gate` have a q_proj twice as
  wide. Their per-request state is not KV per token (simulator/memory.py `gdn_layout`).
- A multimodal checkpoint's vision tower is on the first pp stage (vLLM builds towers there only)
  where the config names one vLLM builds as Qwen3-VL's ViT (Qwen3-VL, Qwen3.5: patch embedding,
  position embedding, blocks of LayerNorms, fused qkv, proj and a GELU MLP, the patch merger and
  Qwen3-VL's deepstack mergers), SigLIP's (Gemma 3, with its multimodal projector) or MoonViT
  (Kimi-K2.5, with its patch-merger projector): linear weights and column-parallel biases split by
  tp (vLLM's default `mm_encoder_tp_mode` "weights"; Kimi's tower whole where tp does not divide its
  heads), the rest replicated, in bf16 (`vision_params_*`; 446,571,248 parameters for Qwen3.5's,
  534.0-576.4 M for Qwen3-VL's, 419.8-423.1 M for Gemma 3's, 471,143,920 for Kimi-K2.5's,
  transformers' counts). Other vision towers (Llama 4's) are not counted (`vision_encoder_note`);
  nor is vLLM's multimodal memory profiling. `--language-model-only` drops the tower, as vLLM does.
- KV cache: `kv_bytes_per_token_per_rank` counts every attention layer of the worst pp stage (the bytes
  a token's K/V occupy if every layer keeps it). MLA stores (kv_lora_rank + qk_rope_head_dim)
  elements per token per layer on every TP rank. How vLLM groups full and sliding-window layers
  into block pools is in simulator/memory.py (`kv_layout`), which uses `is_sliding_layer`.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from frontier.quant import BF16_BYTES, LM_HEAD, QuantSpec, parse_quantization
from frontier.text_file import read_json
from frontier.vision import VisionTower

if TYPE_CHECKING:
    from frontier.parallel import ParallelSpec

VOCAB_PADDING = 64  # vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as vllm/distributed/utils.py get_pp_indices (no env override).

    Remainder layers go to the stages before the last: 61 layers, pp=4 -> [15, 15, 16, 15].
    """
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of one model; sizes in elements, memory results in bytes."""

    name: str
    architecture: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (0 when every layer is MoE)
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    num_expert_groups: int = 1   # DeepSeek-V3's n_group (EPLB packs the groups to nodes)
    num_mtp_layers: int = 0      # multi-token-prediction layers (num_nextn_predict_layers): --speculative-config mtp
    shared_expert_intermediate_size: int = 0  # width of ONE shared expert
    num_dense_layers: int = 0  # leading dense layers of an MoE model
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    num_sliding_layers: int = 0
    # per-layer kinds from the config's `layer_types` (True = sliding window); () = the
    # num_sliding_layers spread evenly (`is_sliding_layer`)
    sliding_layer_flags: tuple[bool, ...] = ()
    # Llama 4's chunked local attention: layers flagged True attend only within their
    # attention_chunk_size-token chunk of the sequence (the others, NoPE layers, attend to all)
    attention_chunk_size: int = 0
    chunked_layer_flags: tuple[bool, ...] = ()
    # which layers are MoE (True) when they interleave with dense ones (Llama 4 Maverick: every
    # 2nd); () = the num_dense_layers dense layers first (DeepSeek's first_k_dense_replace)
    moe_layer_flags: tuple[bool, ...] = ()
    # a multimodal checkpoint (a vision_config, or an architecture "...ForConditionalGeneration"; the
    # catalogue's Llama 4 configs were trimmed of theirs): vLLM loads a vision encoder, whose
    # weights the memory model counts where it knows the tower (vision_params_*), and whose
    # multimodal profiling it does not (requests are text only)
    has_vision_encoder: bool = False
    # its vision tower's parameters (Qwen3-VL / Qwen3.5's, Gemma 3's and Kimi-K2.5's counted; 0 for
    # another kind, not counted): those vLLM splits by TP (linear weights, column-parallel biases)
    # and those every rank holds
    vision_params_sharded: int = 0
    vision_params_replicated: int = 0
    # a tower vLLM runs data-parallel (every rank holds it whole) when TP does not divide its
    # attention heads (Kimi-K2.5's MoonViT: `is_vit_use_data_parallel(num_heads)`); 0: always split
    vision_num_heads: int = 0
    # the modalities its tower serves (vLLM's ``_mark_tower_model``: Qwen's image and video, Gemma 3's
    # image, Kimi-K2.5's vision_chunk); --limit-mm-per-prompt 0 for all of them drops the tower
    vision_modalities: tuple[str, ...] = ()
    # the tower's shape (``frontier.vision``: the images' placeholder tokens and the encoder's
    # work); None where the tower is not known (or there is none)
    vision: VisionTower | None = None
    # Gated DeltaNet layers (Qwen3.5 / Qwen3-Next `layer_types` "linear_attention"), True per GDN
    # layer: linear attention whose per-request cache is a fixed-size state (a causal-conv state and
    # a per-head key x value temporal state: vLLM's MambaSpec), not per-token K/V. Their shape:
    # key / value heads and head dims, the conv kernel width, and the temporal state's dtype as the
    # config names it (`mamba_ssm_dtype`, read for Qwen3.5 only, as vLLM's Qwen3.5 config hook does;
    # "" = the conv state's dtype), and the conv state's (`mamba_conv_dtype`: "" = the model dtype,
    # bf16; both set by the engine's --mamba-cache-dtype / --mamba-ssm-cache-dtype). () = no GDN layer
    linear_attention_flags: tuple[bool, ...] = ()
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    mamba_ssm_dtype: str = ""
    mamba_conv_dtype: str = ""
    # full attention's q projection also yields a per-head output gate (Qwen3-Next / Qwen3.5
    # `attn_output_gate`: q_proj twice as wide)
    attn_output_gate: bool = False
    # RMSNorms per decoder layer: 2 (input, post-attention), 4 for Gemma 2 / 3's sandwich norms
    # (input, post-attention, pre-feedforward, post-feedforward)
    norms_per_layer: int = 2
    # q/k RMSNorm over the whole TP-sharded projection (MiniMax-M2): vLLM's
    # MiniMaxText01RMSNormTP all-reduces each token's q and k variances ([T, 2] fp32) across
    # the TP group in every layer, with kernels of its own (BatchEngine._tp_wide_qk_norm_ops)
    tp_wide_qk_norm: bool = False
    # dtype of the MoE router's weights and product: "bf16", or "fp32" (MiniMax-M2: vLLM keeps its
    # gate in fp32 and multiplies in fp32; see BatchEngine._router_ops)
    router_dtype: str = "bf16"
    # Nemotron-H's hybrid_override_pattern: every layer ONE block, "M" a Mamba2 mixer (its state in
    # the GDN fields: key heads = n_groups, key head dim = ssm_state_size, value heads =
    # mamba_num_heads, value head dim = mamba_head_dim, the shapes vLLM's mamba2_state_shape gives),
    # "*" attention, "-" an MLP, "E" an MoE; one RMSNorm a block. "" = every layer an attention (or
    # GDN) mixer and an MLP / MoE
    block_pattern: str = ""
    # MLPs and experts gate_up + SiLU-and-mul + down (True), or up + activation + down (False:
    # Nemotron-H's relu2)
    mlp_gated: bool = True
    # latent MoE (Nemotron 3 Super / Ultra): the routed experts work on tokens projected from the
    # hidden size to this width (``fc1_latent_proj``) and back (``fc2_latent_proj``), replicated
    # bf16 linears; the shared experts see the hidden states. 0 = none
    moe_latent_size: int = 0
    quant: QuantSpec = field(default_factory=QuantSpec)

    def __post_init__(self) -> None:
        for f in ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size"):
            if getattr(self, f) <= 0:
                raise ValueError(f"ModelSpec.{f}={getattr(self, f)} must be > 0 ({self.name})")
        if self.num_experts and (self.num_experts_per_tok <= 0 or self.moe_intermediate_size <= 0):
            raise ValueError(f"MoE model {self.name}: num_experts_per_tok={self.num_experts_per_tok} and "
                             f"moe_intermediate_size={self.moe_intermediate_size} must be > 0")
        if self.router_dtype not in ROUTER_DTYPES:
            raise ValueError(f"ModelSpec.router_dtype={self.router_dtype!r} ({self.name}); valid: {ROUTER_DTYPES}")
        if not 0 <= self.num_dense_layers <= self.num_layers:
            raise ValueError(f"num_dense_layers={self.num_dense_layers} must be in [0, {self.num_layers}]")
        if self.num_dense_layers and self.intermediate_size <= 0:
            raise ValueError(f"{self.name}: {self.num_dense_layers} dense layers need intermediate_size > 0")
        if not 0 <= self.num_sliding_layers <= self.num_layers:
            raise ValueError(f"num_sliding_layers={self.num_sliding_layers} must be in [0, {self.num_layers}]")
        flags = self.sliding_layer_flags
        if flags and (len(flags) != self.num_layers or sum(flags) != self.num_sliding_layers):
            raise ValueError(f"{self.name}: sliding_layer_flags has {len(flags)} layers, {sum(flags)} sliding; "
                             f"need {self.num_layers} layers, {self.num_sliding_layers} sliding")
        if self.attention_chunk_size < 0 or bool(self.attention_chunk_size) != bool(self.chunked_layer_flags) \
                or (self.chunked_layer_flags and len(self.chunked_layer_flags) != self.num_layers):
            raise ValueError(f"{self.name}: attention_chunk_size={self.attention_chunk_size} needs one chunked-layer "
                             f"flag per layer ({self.num_layers}), got {len(self.chunked_layer_flags)}")
        if self.attention_chunk_size and self.sliding_window:
            raise ValueError(f"{self.name}: both a sliding window and attention chunks; vLLM's hybrid KV cache "
                             "takes one local attention kind")
        if self.moe_layer_flags and (len(self.moe_layer_flags) != self.num_layers
                                     or self.num_layers - sum(self.moe_layer_flags) != self.num_dense_layers):
            raise ValueError(f"{self.name}: moe_layer_flags must flag {self.num_layers - self.num_dense_layers} "
                             f"of {self.num_layers} layers")
        flags = self.linear_attention_flags
        if flags:
            shape = (self.linear_num_key_heads, self.linear_num_value_heads, self.linear_key_head_dim,
                     self.linear_value_head_dim, self.linear_conv_kernel_dim)
            if len(flags) != self.num_layers or min(shape) <= 0:
                raise ValueError(f"{self.name}: linear_attention_flags must flag each of {self.num_layers} layers "
                                 f"(got {len(flags)}) and the GDN key / value heads, head dims and conv kernel "
                                 f"{shape} must be > 0")
            if self.linear_num_value_heads % self.linear_num_key_heads:
                raise ValueError(f"{self.name}: linear_num_value_heads={self.linear_num_value_heads} must be a "
                                 f"multiple of linear_num_key_heads={self.linear_num_key_heads}")
            if self.sliding_window or self.attention_chunk_size or self.is_mla:
                raise ValueError(f"{self.name}: Gated DeltaNet layers with sliding-window, chunked or MLA "
                                 "attention are not modelled")
        if self.norms_per_layer not in (1, 2, 4):
            raise ValueError(f"ModelSpec.norms_per_layer={self.norms_per_layer} ({self.name}); valid: 1, 2, 4")
        p = self.block_pattern
        if p and (len(p) != self.num_layers or set(p) - set(BLOCK_KINDS)
                  or tuple(c == "M" for c in p) != (self.linear_attention_flags or (False,) * len(p))
                  or ("E" in p and tuple(c == "E" for c in p) != self.moe_layer_flags)):
            raise ValueError(f"{self.name}: block_pattern {p[:40]!r} must give each of {self.num_layers} layers one of "
                             f"{BLOCK_KINDS!r}, its M layers the linear-attention flags and its E layers the MoE flags")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_chunked_layers(self) -> int:
        return sum(self.chunked_layer_flags)

    def is_chunked_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-based) runs chunked local attention (Llama 4)."""
        return bool(self.chunked_layer_flags) and self.chunked_layer_flags[layer]

    @property
    def num_linear_attention_layers(self) -> int:
        return sum(self.linear_attention_flags)

    def is_linear_attention_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-based) is a Gated DeltaNet layer (no per-token KV)."""
        return bool(self.linear_attention_flags) and self.linear_attention_flags[layer]

    @property
    def linear_key_dim(self) -> int:
        """A Gated DeltaNet layer's q (and k) width: key heads x key head dim (all TP ranks)."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        """A Gated DeltaNet layer's v (and output) width: value heads x value head dim."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """The channels of a Gated DeltaNet layer's causal conv1d (and its conv state): q, k and v."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def mamba_state_elem_bytes(self) -> tuple[int, int]:
        """(conv state, temporal state) bytes per element: ``mamba_conv_dtype`` ("" = the bf16 model
        dtype) and ``mamba_ssm_dtype`` ("" = the conv state's), as vLLM resolves them."""
        conv = MAMBA_DTYPE_BYTES.get(self.mamba_conv_dtype, int(BF16_BYTES))
        return conv, MAMBA_DTYPE_BYTES.get(self.mamba_ssm_dtype, conv)

    def has_attention(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) runs attention (KV per token): not a GDN / Mamba2 layer,
        nor an MLP or MoE block of a block pattern."""
        if self.block_pattern:
            return self.block_pattern[layer] == "*"
        return not self.is_linear_attention_layer(layer)

    def has_ffn(self, layer: int) -> bool:
        """Whether layer `layer` runs an MLP or MoE (every layer, but a block pattern's mixers)."""
        return not self.block_pattern or self.block_pattern[layer] in "-E"

    @property
    def num_attention_layers(self) -> int:
        return sum(1 for i in range(self.num_layers) if self.has_attention(i))

    @property
    def num_mlp_layers(self) -> int:
        """Layers with a dense MLP (not MoE)."""
        return sum(1 for i in range(self.num_layers) if self.has_ffn(i) and not self.is_moe_layer(i))

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-based) is an MoE layer."""
        if not self.is_moe:
            return False
        return self.moe_layer_flags[layer] if self.moe_layer_flags else layer >= self.num_dense_layers

    # ---- weights -------------------------------------------------------------------------
    def _attention_bytes(self, tp: int) -> float:
        q = self.quant.bytes_per_param("attention")
        heads = self.num_attention_heads // tp
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            replicated = h * (self.kv_lora_rank + self.qk_rope_head_dim)  # kv_a_proj_with_mqa
            split = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)  # kv_b_proj
            split += heads * self.v_head_dim * h  # o_proj
            if self.q_lora_rank:
                replicated += h * self.q_lora_rank  # q_a_proj
                split += self.q_lora_rank * heads * qk  # q_b_proj
            else:
                split += h * heads * qk  # q_proj
            norms = self.q_lora_rank + self.kv_lora_rank
            return (replicated + split) * q + norms * BF16_BYTES
        kv_heads = max(1, self.num_kv_heads // tp)
        q_width = heads * self.head_dim * (2 if self.attn_output_gate else 1)     # + the output gate
        return (h * q_width + h * heads * self.head_dim + 2 * h * kv_heads * self.head_dim) * q

    def _gdn_bytes(self, tp: int) -> float:
        """A Gated DeltaNet layer on one TP rank (vLLM QwenGatedDeltaNetAttention): in_proj_qkvz
        (hidden -> 2 x key_dim + 2 x value_dim) and in_proj_ba (hidden -> 2 x value heads), split
        by TP, and out_proj (value_dim -> hidden), at the "linear_attention" part's bytes; the
        depthwise conv1d (conv_dim x kernel), A_log, dt_bias and the gated norm in bf16."""
        q = self.quant.bytes_per_param("linear_attention")
        h = self.hidden_size
        key_dim, value_dim = self.linear_key_dim, self.linear_value_dim
        projections = h * _ceil_div(2 * key_dim + 2 * value_dim + 2 * self.linear_num_value_heads, tp) \
            + _ceil_div(value_dim, tp) * h
        small = (_ceil_div(self.linear_conv_dim, tp) * self.linear_conv_kernel_dim
                 + 2 * _ceil_div(self.linear_num_value_heads, tp) + self.linear_value_head_dim)
        return projections * q + small * BF16_BYTES

    def _mamba2_bytes(self, tp: int) -> float:
        """A Mamba2 mixer on one TP rank (vLLM MambaMixer2): in_proj (hidden -> z, x, B, C and dt:
        2 x intermediate + 2 x n_groups x state + heads) and out_proj (intermediate -> hidden) split
        by TP at the "linear_attention" part's bytes; the depthwise conv1d with its bias, A, D,
        dt_bias and the gated norm in bf16 (intermediate = heads x head dim)."""
        q = self.quant.bytes_per_param("linear_attention")
        h, inter = self.hidden_size, self.linear_value_dim
        heads = _ceil_div(self.linear_num_value_heads, tp)
        conv = _ceil_div(self.linear_conv_dim, tp)
        projections = h * _ceil_div(2 * inter + 2 * self.linear_key_dim + self.linear_num_value_heads, tp) \
            + _ceil_div(inter, tp) * h
        small = conv * (self.linear_conv_kernel_dim + 1) + 3 * heads + _ceil_div(inter, tp)
        return projections * q + small * BF16_BYTES

    def _mlp_bytes(self, moe: bool, parallel: ParallelSpec) -> float:
        h, mats = self.hidden_size, 3 if self.mlp_gated else 2     # gate, up, down (or up, down)
        if not moe:
            return mats * h * _ceil_div(self.intermediate_size, parallel.tp) * self.quant.bytes_per_param("dense_mlp")
        local_experts = parallel.local_experts(self.num_experts)
        inter = _ceil_div(self.moe_intermediate_size, parallel.moe_tp)
        width = self.moe_latent_size or h      # the experts' input width
        routed = local_experts * mats * width * inter * self.quant.bytes_per_param("routed_experts")
        routed += 2 * h * self.moe_latent_size * BF16_BYTES       # the latent projections (0 without)
        shared_inter = self.num_shared_experts * self.shared_expert_intermediate_size
        shared = mats * h * _ceil_div(shared_inter, parallel.tp) * self.quant.bytes_per_param("shared_experts")
        router = h * self.num_experts * BF16_BYTES
        return routed + shared + router

    def layer_bytes_per_rank(self, layer: int, parallel: ParallelSpec) -> float:
        """Weight bytes of decoder layer `layer` (0-based) on one rank: its mixer (attention, GDN or
        Mamba2), its MLP / MoE and its norms (a block pattern's layer: one of them and one norm)."""
        norms = self.norms_per_layer * self.hidden_size * BF16_BYTES
        if self.is_linear_attention_layer(layer):
            mixer = self._mamba2_bytes(parallel.tp) if self.block_pattern else self._gdn_bytes(parallel.tp)
        else:
            mixer = self._attention_bytes(parallel.tp) if self.has_attention(layer) else 0.0
        ffn = self._mlp_bytes(self.is_moe_layer(layer), parallel) if self.has_ffn(layer) else 0.0
        return mixer + ffn + norms

    def weight_bytes_per_rank(self, parallel: ParallelSpec) -> int:
        """Weight bytes on one GPU of the worst pipeline stage (see module docstring)."""
        layers = [self.layer_bytes_per_rank(i, parallel) for i in range(self.num_layers)]
        padded_vocab = _ceil_div(self.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
        vocab_shard = _ceil_div(padded_vocab, parallel.tp) * self.hidden_size * BF16_BYTES
        stages, start = [], 0
        for i, n in enumerate(pp_partition(self.num_layers, parallel.pp)):
            total = sum(layers[start:start + n])
            start += n
            first, last = i == 0, i == parallel.pp - 1
            if first:
                total += vocab_shard + self.vision_bytes_per_rank(parallel.tp)  # embed_tokens (+ a vision tower)
            if last:
                total += self.hidden_size * BF16_BYTES  # final norm
                if not (self.tie_word_embeddings and first):   # lm_head: a separate copy unless tied on the same stage
                    total += vocab_shard / BF16_BYTES * self.quant.bytes_per_param(LM_HEAD)
            stages.append(total)
        return int(round(max(stages)))

    # ---- KV cache ------------------------------------------------------------------------
    def kv_bytes_per_token_per_layer(self, tp: int) -> float:
        """KV bytes one token adds to one layer on one TP rank (K + V, or MLA latent + rope)."""
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.quant.kv_bytes_per_elem
        return 2 * max(1, self.num_kv_heads // tp) * self.head_dim * self.quant.kv_bytes_per_elem

    def kv_bytes_per_token_per_rank(self, parallel: ParallelSpec) -> int:
        """KV bytes one token occupies on one rank of the worst pp stage (all its attention
        layers; a Gated DeltaNet layer's state does not grow with the tokens)."""
        layers = self.most_layers_per_stage(parallel.pp, self.has_attention)
        return int(round(layers * self.kv_bytes_per_token_per_layer(parallel.tp)))

    def most_layers_per_stage(self, pp: int, counted) -> int:
        """The most layers i with ``counted(i)`` that one of ``pp`` pipeline stages holds."""
        worst, start = 0, 0
        for n in pp_partition(self.num_layers, pp):
            worst = max(worst, sum(1 for i in range(start, start + n) if counted(i)))
            start += n
        return worst

    def vision_bytes_per_rank(self, tp: int) -> int:
        """Bytes of the vision tower on one rank of the first pp stage (bf16; module docstring)."""
        if self.vision_num_heads and self.vision_num_heads % tp:     # vLLM falls back to a replicated tower
            return (self.vision_params_sharded + self.vision_params_replicated) * BF16_BYTES
        return int(round((self.vision_params_sharded / tp + self.vision_params_replicated) * BF16_BYTES))

    def vision_encoder_note(self) -> str | None:
        """A one-line note for a multimodal checkpoint: what the simulator leaves out (None otherwise)."""
        if not self.has_vision_encoder:
            return None
        if self.vision_params_sharded or self.vision_params_replicated:
            served = ("its image requests' encoder work is priced (simulator.multimodal)"
                      if self.vision is not None and self.vision.image_error() is None else "it is run text-only")
            return (f"{self.name} is a multimodal checkpoint: its vision encoder's weights are counted "
                    "(--language-model-only drops them, as the engines do), vLLM's multimodal memory profiling "
                    f"(the encoder's activations and outputs at startup) is not; {served}")
        return (f"{self.name} is a multimodal checkpoint run text-only: its vision encoder's weights and "
                "vLLM's multimodal memory profiling are not counted, so the KV budget is that much larger "
                "than vLLM's")

    def is_sliding_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-based) uses sliding-window attention: the config's
        `layer_types` (``sliding_layer_flags``; Gemma 2 / 3 derive them as transformers does when
        the file has none), else the sliding layers spread evenly, first layer sliding: layer i
        is sliding iff ceil((i+1)*S/N) > ceil(i*S/N) (all-sliding Mistral-style models).
        """
        if self.sliding_layer_flags:
            return self.sliding_layer_flags[layer]
        s, n = self.num_sliding_layers, self.num_layers
        return _ceil_div((layer + 1) * s, n) > _ceil_div(layer * s, n)


# ---- loading ------------------------------------------------------------------------------

ROUTER_DTYPES = ("bf16", "fp32")
BLOCK_KINDS = "M*-E"     # a block pattern's layers: Mamba2, attention, MLP, MoE (ModelSpec.block_pattern)
MAMBA_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}   # a Gated DeltaNet state's element
SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "gpt_oss", "mimo",
    "deepseek_v2", "deepseek_v3", "kimi_k2", "qwen3_vl_text", "qwen3_vl_moe_text", "minimax_m2",
    "gemma", "gemma2", "gemma3_text", "llama4_text", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
    "nemotron_h",
)
# Gemma config classes' defaults (transformers 5.20 GemmaConfig, Gemma2Config, Gemma3TextConfig):
# the hub's config.json files omit the fields equal to them (google/gemma-3-27b-it's text_config
# names no vocab_size), and vLLM reads the config through those classes.
_GEMMA_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
              "max_position_embeddings": 8192, "tie_word_embeddings": True},
    "gemma2": {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
               "max_position_embeddings": 8192, "tie_word_embeddings": True, "sliding_window": 4096},
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131072, "tie_word_embeddings": True, "sliding_window": 4096},
}
# Every k-th layer is full attention, the others sliding, when the config has no layer_types
# (Gemma2Config: every 2nd; Gemma3TextConfig: every `sliding_window_pattern`-th, default 6)
_GEMMA_FULL_EVERY = {"gemma2": 2, "gemma3_text": 6}
# Gated DeltaNet hybrids: transformers 5.20's Qwen3NextConfig / Qwen3_5TextConfig / Qwen3_5MoeTextConfig
# defaults for the fields a config.json may omit (all three agree), and the interval of their
# full-attention layers when it names no layer_types (layer i full iff (i + 1) % interval == 0)
_GDN_DEFAULTS = {"head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                 "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                 "full_attention_interval": 4}
_GDN_LAYER_TYPES = ("linear_attention", "full_attention")
_CATALOGUE_PACKAGES = (("frontier", "catalogue/models"), ("aiconfigurator_core", "model_configs"))


def load_model_spec(name_or_path: str) -> ModelSpec:
    """ModelSpec from a config.json path, a folder holding one, or a catalogue name.

    Catalogue names ("meta-llama/Llama-3.1-8B") match case-insensitively against
    frontier/catalogue/models/*.json and aiconfigurator_core/model_configs/ (files named
    `org--Name_config.json`); "Llama-3.1" also finds "Meta-Llama-3.1". A sibling
    `hf_quant_config.json` (modelopt) is read when present.
    """
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        hf_quant_path = path.with_name("hf_quant_config.json")
        hf_quant = _read_json_object(hf_quant_path) if hf_quant_path.is_file() else None
        return model_spec_from_config(_read_json_object(path), path.parent.name or str(path), hf_quant)
    config, hf_quant = _catalogue_lookup(name_or_path)
    return model_spec_from_config(config, name_or_path, hf_quant)


def find_model_config(name_or_path: str) -> dict[str, Any] | None:
    """The raw config.json object ``load_model_spec`` would read for ``name_or_path`` (a path, a
    folder or a catalogue name), or None when there is none (a hub name not in the catalogue)."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return _read_json_object(path)
    try:
        return _catalogue_lookup(name_or_path)[0]
    except ValueError:
        return None


def _read_json_object(path: Path) -> dict[str, Any]:
    """A local JSON file's top-level object; ValueError naming the file when it is not one."""
    data = read_json(path, "model config")
    if not isinstance(data, dict):
        raise ValueError(f"model config {str(path)!r} holds a JSON {type(data).__name__}, not an object")
    return data


def _normalize(name: str) -> str:
    return name.lower().replace("--", "/").replace("_config.json", "").replace(".json", "")


def _catalogue_files() -> dict[str, Any]:
    files: dict[str, Any] = {}
    for package, sub in _CATALOGUE_PACKAGES:
        try:
            folder = resources.files(package).joinpath(sub)
        except ModuleNotFoundError:
            continue
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.name.endswith(".json") and not entry.name.endswith("hf_quant_config.json"):
                files.setdefault(_normalize(entry.name), (folder, entry))
    return files


def catalogue_names() -> list[str]:
    """Every catalogue name ``load_model_spec`` accepts, as its file names it ("org/Name"), sorted
    case-insensitively (models the simulator does not support included: loading them says why)."""
    return sorted((_display_name(e.name) for _, e in _catalogue_files().values()), key=str.lower)


def _display_name(file_name: str) -> str:
    """Catalogue name of a config file: "org--Name_config.json" -> "org/Name" (case kept)."""
    return file_name.replace("--", "/").replace("_config.json", "").replace(".json", "")


def _catalogue_lookup(name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    files = _catalogue_files()
    key = _normalize(name)
    if key not in files and "/" in key:  # meta-llama/Llama-3.1-8B -> meta-llama/meta-llama-3.1-8b
        org, model = key.split("/", 1)
        key = f"{org}/meta-{model}" if f"{org}/meta-{model}" in files else key
    if key not in files and "/" not in key:  # bare name: gpt-oss-120b -> openai/gpt-oss-120b
        hits = [k for k in files if k.split("/")[-1] in (key, f"meta-{key}")]
        key = hits[0] if len(hits) == 1 else key
    if key not in files:
        close = difflib.get_close_matches(key, list(files), n=5, cutoff=0.5)
        hint = f"close matches: {', '.join(_display_name(files[k][1].name) for k in close)}; " if close else ""
        raise ValueError(f"unknown model {name!r}: not a config.json path nor a catalogue name; "
                         f"{hint}`frontier models` lists the catalogue")
    folder, entry = files[key]
    quant_entry = folder.joinpath(entry.name.replace("_config.json", "_hf_quant_config.json"))
    hf_quant = json.loads(quant_entry.read_text()) if quant_entry.name != entry.name and quant_entry.is_file() else None
    return json.loads(entry.read_text()), hf_quant


def model_spec_from_config(config: dict[str, Any], name: str, hf_quant: dict[str, Any] | None = None) -> ModelSpec:
    """ModelSpec from a parsed config.json dict (the LLM may sit under `text_config`)."""
    if not isinstance(config, dict):
        raise ValueError(f"{name}: config.json holds a JSON {type(config).__name__}, not an object")
    top = config
    cfg = {**top, **top["text_config"]} if isinstance(top.get("text_config"), dict) else top
    model_type = str(cfg.get("model_type", ""))
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{name}: unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if model_type in _GEMMA_DEFAULTS:
        cfg = _gemma_config(cfg, model_type, name)
    if model_type == "nemotron_h" and isinstance(cfg.get("layers_block_type"), list):
        cfg = {**cfg, "hybrid_override_pattern": _nemotron_blocks_pattern(cfg["layers_block_type"], name),
               "num_hidden_layers": cfg.get("num_hidden_layers") or len(cfg["layers_block_type"])}
    gdn = model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
    if gdn:
        cfg = {**_GDN_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if not cfg.get(k)]
    if missing:
        raise ValueError(f"{name}: config.json lacks required field(s) {missing}")
    _check_whole_fields(cfg, name)
    arch = (cfg.get("architectures") or top.get("architectures") or [model_type])[0]
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    layers = int(cfg["num_hidden_layers"])
    num_experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0)
    inter = int(cfg.get("intermediate_size") or 0)
    moe_inter = int(cfg.get("moe_intermediate_size") or 0) if num_experts else 0
    if num_experts and not moe_inter:  # Mixtral, gpt-oss, Llama 4: intermediate_size is the expert width
        moe_inter, inter = inter, 0
    moe_flags: tuple[bool, ...] = ()
    nemotron = _nemotron_h(cfg, layers, name) if model_type == "nemotron_h" else {}
    if model_type == "llama4_text":     # vLLM Llama4DecoderLayer: MoE iff (i + 1) % step == 0, dense MLP wider
        step = int(cfg.get("interleave_moe_layer_step", 1) or 0)
        moe_flags = tuple(step > 0 and (i + 1) % step == 0 for i in range(layers))
        inter = int(cfg.get("intermediate_size_mlp") or 16384) if not all(moe_flags) else 0
        dense = layers - sum(moe_flags)
        moe_flags = moe_flags if 0 < dense < layers else ()
    elif model_type == "nemotron_h":
        moe_flags = tuple(c == "E" for c in nemotron["block_pattern"]) if num_experts else ()
        dense = layers - sum(moe_flags) if num_experts else 0
    else:
        dense = _num_dense_layers(cfg, layers) if num_experts else 0
    if num_experts and dense == 0:
        inter = 0
    shared = int(cfg.get("n_shared_experts") or 0)
    shared_inter = moe_inter if shared else 0
    if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert of this width
        shared, shared_inter = 1, int(cfg["shared_expert_intermediate_size"])
    if model_type == "llama4_text" and num_experts:  # Llama4MoE: one shared expert as wide as a routed one
        shared, shared_inter = 1, moe_inter
    if model_type == "nemotron_h" and shared:      # NemotronHMoE: n_shared_experts of this width
        shared_inter = int(cfg.get("moe_shared_expert_intermediate_size") or 0)
    kv_lora = int(cfg.get("kv_lora_rank") or 0)
    head_dim = int(cfg.get("head_dim") or cfg.get("attention_head_dim") or hidden // heads)
    if kv_lora:
        head_dim = int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"])
    window, sliding_layers = _sliding(cfg, layers)
    quant_cfg = cfg.get("quantization_config") or top.get("quantization_config")
    quant = parse_quantization(quant_cfg, hf_quant)
    return ModelSpec(
        name=name, architecture=arch, hidden_size=hidden, num_layers=layers, num_attention_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=head_dim, intermediate_size=inter,
        vocab_size=int(cfg["vocab_size"]), tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 0),
        num_experts=num_experts,
        num_experts_per_tok=int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0),
        moe_intermediate_size=moe_inter, num_shared_experts=shared, shared_expert_intermediate_size=shared_inter,
        num_expert_groups=int(cfg.get("n_group") or 1),
        num_mtp_layers=int(cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0),
        num_dense_layers=dense, kv_lora_rank=kv_lora, q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0) if kv_lora else 0,
        qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0) if kv_lora else 0,
        v_head_dim=int(cfg.get("v_head_dim") or 0) if kv_lora else 0,
        sliding_window=window, num_sliding_layers=sliding_layers, quant=quant,
        sliding_layer_flags=_sliding_flags(cfg, layers, name) if window and cfg.get("layer_types") else (),
        **_chunked(cfg, layers, name) if model_type == "llama4_text" else {}, moe_layer_flags=moe_flags,
        norms_per_layer=4 if model_type in _GEMMA_FULL_EVERY else 1 if model_type == "nemotron_h" else 2,
        **_gdn(cfg, layers, name) if gdn else {},
        **nemotron,
        has_vision_encoder=isinstance(top.get("vision_config"), dict) or arch.endswith("ForConditionalGeneration"),
        **_vision_params(top, hidden),
        tp_wide_qk_norm=model_type == "minimax_m2",
        router_dtype="fp32" if model_type in ("minimax_m2", "nemotron_h") else "bf16",
    )


# vision_config model types vLLM builds as Qwen3-VL's ViT (``Qwen3_VisionTransformer``): Qwen3-VL's,
# Qwen3.5's, and the names NVIDIA's Qwen3.5 / Qwen3.6 checkpoints give the same tower
_QWEN_VIT_TYPES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_5_vision", "qwen3_5_moe_vision")
# transformers 5.20's Kimi_K25VisionConfig defaults, which vLLM 0.33 takes for the hub's old-schema
# vision_config (its vt_* / init_pos_emb_* keys are not that class's fields; the values agree)
_KIMI_VIT_DEFAULTS = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                      "num_attention_heads": 16, "patch_size": 14, "pos_emb_height": 64, "pos_emb_width": 64,
                      "merge_kernel_size": (2, 2)}


def _vision_params(top: dict[str, Any], text_hidden: int) -> dict[str, Any]:
    """``vision_params_sharded`` / ``_replicated`` (``vision_num_heads``, ``vision_modalities``) of the
    vision tower vLLM builds for a multimodal config: Qwen3-VL's ViT (Qwen3-VL, Qwen3.5:
    ``Qwen3_VisionTransformer``), SigLIP's (Gemma 3: ``SiglipVisionModel`` and
    ``Gemma3MultiModalProjector``) or MoonViT (Kimi-K2.5: ``MoonViT3dPretrainedModel`` and
    ``KimiK25MultiModalProjector``). Per block fused qkv (QKVParallelLinear) and the MLP's fc1
    (column-parallel) with their biases, the output projection and fc2 (row-parallel: weights split,
    biases replicated), two LayerNorms; the patch and position embeddings replicated. Qwen: the
    patch merger (and each deepstack merger, whose norm spans the merged width) a LayerNorm, fc1
    (column-parallel) and fc2 (row-parallel). Gemma 3: SigLIP's post-LayerNorm and the projector (a
    vision x text matrix and an RMSNorm), replicated. Kimi: a final LayerNorm, the projector
    (LayerNorm, two ReplicatedLinear layers with biases over the 2x2-merged width), replicated; the
    tower whole on every rank when TP does not divide its heads. {} for other towers (not
    counted)."""
    def blocks(h: int, inter: int, depth: int) -> tuple[int, int]:
        """(sharded, replicated) parameters of ``depth`` ViT blocks: fused qkv and fc1 with their
        biases, proj and fc2 (row-parallel: biases replicated), two LayerNorms."""
        return depth * (3 * h * h + 3 * h + h * h + h * inter + inter + inter * h), depth * (4 * h + h + h)

    vc = top.get("vision_config")
    if top.get("model_type") == "kimi_k25" and isinstance(vc, dict):
        k = {**_KIMI_VIT_DEFAULTS, **{key: vc[key] for key in _KIMI_VIT_DEFAULTS if vc.get(key) is not None}}
        h, inter, depth = int(k["hidden_size"]), int(k["intermediate_size"]), int(k["num_hidden_layers"])
        wide = h * int(k["merge_kernel_size"][0]) * int(k["merge_kernel_size"][1])
        sharded, replicated = blocks(h, inter, depth)
        replicated += (3 * int(k["patch_size"]) ** 2 * h + h
                       + int(k["pos_emb_height"]) * int(k["pos_emb_width"]) * h + 2 * h
                       + 2 * h + wide * wide + wide + wide * text_hidden + text_hidden)
        tower = VisionTower("moonvit", h, inter, depth, int(k["num_attention_heads"]), int(k["patch_size"]),
                            int(k["merge_kernel_size"][0]), text_hidden)
        return {"vision_params_sharded": sharded, "vision_params_replicated": replicated,
                "vision_num_heads": int(k["num_attention_heads"]), "vision_modalities": ("vision_chunk",),
                "vision": tower}
    if isinstance(vc, dict) and vc.get("model_type") == "siglip_vision_model":
        h, inter, depth = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["num_hidden_layers"])
        patch = int(vc.get("num_channels", 3)) * int(vc["patch_size"]) ** 2
        positions = (int(vc["image_size"]) // int(vc["patch_size"])) ** 2
        sharded, replicated = blocks(h, inter, depth)
        replicated += patch * h + h + positions * h + 2 * h + h * text_hidden + h
        tokens = int(top.get("mm_tokens_per_image") or 256)
        side = int(vc["image_size"]) // int(vc["patch_size"])
        tower = VisionTower("siglip", h, inter, depth, int(vc["num_attention_heads"]), int(vc["patch_size"]),
                            side // math.isqrt(tokens), text_hidden, image_size=int(vc["image_size"]),
                            tokens_per_image=tokens)
        return {"vision_params_sharded": sharded, "vision_params_replicated": replicated,
                "vision_modalities": ("image",), "vision": tower}
    if not isinstance(vc, dict) or vc.get("model_type") not in _QWEN_VIT_TYPES:
        return {}
    h, inter, depth = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["depth"])
    out, merge = int(vc["out_hidden_size"]), int(vc.get("spatial_merge_size", 2)) ** 2
    patch = int(vc.get("in_channels", 3)) * int(vc.get("temporal_patch_size", 2)) * int(vc["patch_size"]) ** 2
    wide = h * merge
    sharded, replicated = blocks(h, inter, depth)
    replicated += patch * h + h + int(vc.get("num_position_embeddings", 2304)) * h
    for norm in [h] + [wide] * len(vc.get("deepstack_visual_indexes") or ()):    # the merger(s)
        sharded += wide * wide + wide + wide * out
        replicated += 2 * norm + out
    tower = VisionTower("qwen3_vl", h, inter, depth, int(vc["num_heads"]), int(vc["patch_size"]),
                        int(vc.get("spatial_merge_size", 2)), out, temporal_patch=int(vc.get("temporal_patch_size", 2)),
                        num_deepstack=len(vc.get("deepstack_visual_indexes") or ()))
    return {"vision_params_sharded": sharded, "vision_params_replicated": replicated,
            "vision_modalities": ("image", "video"), "vision": tower}


# config.json fields read as whole numbers, with their least valid value when set (0 / null /
# absent mean "not used" for the optional ones and are not checked).
_WHOLE_FIELDS = {"hidden_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 1,
                 "num_key_value_heads": 1, "head_dim": 1, "intermediate_size": 0, "moe_intermediate_size": 0,
                 "num_experts": 0, "num_local_experts": 0, "n_routed_experts": 0, "num_experts_per_tok": 0,
                 "experts_per_token": 0, "n_shared_experts": 0, "shared_expert_intermediate_size": 0,
                 "kv_lora_rank": 0, "q_lora_rank": 0, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0,
                 "v_head_dim": 0, "max_position_embeddings": 0, "sliding_window": 0,
                 "first_k_dense_replace": 0, "moe_layer_freq": 0, "decoder_sparse_step": 0, "n_group": 0,
                 "interleave_moe_layer_step": 0, "intermediate_size_mlp": 0, "linear_num_key_heads": 1,
                 "linear_num_value_heads": 1, "linear_key_head_dim": 1, "linear_value_head_dim": 1,
                 "linear_conv_kernel_dim": 1, "full_attention_interval": 1}


def _check_whole_fields(cfg: dict[str, Any], name: str) -> None:
    """ValueError naming the first set _WHOLE_FIELDS field that is not a whole number >= its minimum."""
    for key, minimum in _WHOLE_FIELDS.items():
        v = cfg.get(key)
        if v is None or v is False or v == 0:
            continue
        whole = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v == int(v))
        if isinstance(v, bool) or not whole or v < minimum:
            raise ValueError(f"{name}: config.json {key}={v!r}; valid: a whole number >= {minimum}")


def _num_dense_layers(cfg: dict[str, Any], layers: int) -> int:
    """Dense (non-MoE) layers of an MoE model; counted, and placed first (exact for DeepSeek)."""
    if cfg.get("first_k_dense_replace") is not None:
        if int(cfg.get("moe_layer_freq") or 1) != 1:
            raise ValueError(f"moe_layer_freq={cfg['moe_layer_freq']} unsupported; only 1")
        return int(cfg["first_k_dense_replace"])
    only = set(cfg.get("mlp_only_layers") or [])
    step = int(cfg.get("decoder_sparse_step") or 1)
    return sum(1 for i in range(layers) if i in only or (i + 1) % step != 0)


def _gemma_config(cfg: dict[str, Any], model_type: str, name: str) -> dict[str, Any]:
    """A Gemma config with its class's defaults for the fields it omits, and (Gemma 2 / 3) the
    ``layer_types`` its class derives when it has none (layer i full iff (i + 1) % k == 0)."""
    out = {**_GEMMA_DEFAULTS[model_type], **cfg}      # a field set to null stays null, as in the class
    _check_whole_fields(out, name)
    if model_type == "gemma3_text" and out.get("use_bidirectional_attention"):
        raise ValueError(f"{name}: use_bidirectional_attention (an embedding model's encoder) is not simulated; "
                         "valid: causal Gemma 3 decoders")
    every = _GEMMA_FULL_EVERY.get(model_type)
    if every and not out.get("layer_types"):
        if model_type == "gemma3_text":
            every = out.get("sliding_window_pattern", every)
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise ValueError(f"{name}: config.json sliding_window_pattern={every!r}; valid: a whole number >= 1")
        out["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                              for i in range(int(out["num_hidden_layers"] or 0))]
    return out


def _sliding_flags(cfg: dict[str, Any], layers: int, name: str) -> tuple[bool, ...]:
    """Per-layer sliding flags of a config's ``layer_types`` (ValueError unless one entry per layer,
    each "sliding_attention" or "full_attention")."""
    types = cfg["layer_types"]
    if not isinstance(types, list) or len(types) != layers or any(
            t not in ("sliding_attention", "full_attention") for t in types):
        raise ValueError(f"{name}: config.json layer_types must list {layers} entries of "
                         f"'sliding_attention' / 'full_attention'; got {str(types)[:80]}")
    return tuple(t == "sliding_attention" for t in types)


def _chunked(cfg: dict[str, Any], layers: int, name: str) -> dict[str, Any]:
    """Llama 4's chunked local attention as transformers' Llama4TextConfig and vLLM read it:
    attention_chunk_size (default 8192; null: none), and a layer is chunked unless it is a NoPE
    layer (``no_rope_layers[i] == 0``; default: every ``no_rope_layer_interval``-th, 4)."""
    chunk = cfg["attention_chunk_size"] if "attention_chunk_size" in cfg else 8192
    if chunk is None:
        return {}
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"{name}: config.json attention_chunk_size={chunk!r}; valid: a whole number >= 1 or null")
    rope = cfg.get("no_rope_layers")
    if not rope:
        interval = cfg.get("no_rope_layer_interval", 4)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"{name}: config.json no_rope_layer_interval={interval!r}; valid: a whole number >= 1")
        rope = [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(rope, list) or len(rope) != layers or any(r not in (0, 1) for r in rope):
        raise ValueError(f"{name}: config.json no_rope_layers must list {layers} entries of 0 / 1; "
                         f"got {str(rope)[:80]}")
    return {"attention_chunk_size": chunk, "chunked_layer_flags": tuple(r == 1 for r in rope)}


def _gdn(cfg: dict[str, Any], layers: int, name: str) -> dict[str, Any]:
    """A Gated DeltaNet hybrid's ModelSpec fields (config with ``_GDN_DEFAULTS`` applied): its
    layer kinds (``layer_types``, or every ``full_attention_interval``-th layer full, as the
    transformers classes derive them), the GDN shape, the temporal state's dtype as the config
    names it (Qwen3.5's; vLLM reads no such field for Qwen3-Next) and the attention output gate
    (vLLM: ``getattr(config, "attn_output_gate", True)``)."""
    types = cfg.get("layer_types")
    if not types:
        every = cfg["full_attention_interval"]
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in _GDN_LAYER_TYPES for t in types):
        raise ValueError(f"{name}: config.json layer_types must list {layers} entries of "
                         f"'linear_attention' / 'full_attention'; got {str(types)[:80]}")
    ssm_dtype = (cfg.get("mamba_ssm_dtype") or "") if cfg["model_type"].startswith("qwen3_5") else ""
    if ssm_dtype not in ("", "float32", "bfloat16", "float16"):
        raise ValueError(f"{name}: config.json mamba_ssm_dtype={ssm_dtype!r}; valid: float32, bfloat16, float16")
    return {"linear_attention_flags": tuple(t == "linear_attention" for t in types),
            **{k: int(cfg[k]) for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                        "linear_value_head_dim", "linear_conv_kernel_dim")},
            "mamba_ssm_dtype": ssm_dtype, "attn_output_gate": bool(cfg.get("attn_output_gate", True))}


_NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_blocks_pattern(types: list, name: str) -> str:
    """Newer Nemotron-H configs' ``layers_block_type`` (mamba / attention / mlp / moe a layer) as
    the ``hybrid_override_pattern`` transformers derives from it."""
    bad = [t for t in types if t not in _NEMOTRON_BLOCKS]
    if bad:
        raise ValueError(f"{name}: config.json layers_block_type holds {bad[0]!r}; valid: {', '.join(_NEMOTRON_BLOCKS)}")
    return "".join(_NEMOTRON_BLOCKS[t] for t in types)


def _nemotron_pattern(cfg: dict[str, Any], layers: int, name: str) -> str:
    """Nemotron-H's ``hybrid_override_pattern`` (one block kind a layer), checked."""
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set(BLOCK_KINDS):
        raise ValueError(f"{name}: config.json hybrid_override_pattern must give each of {layers} layers one of "
                         f"{BLOCK_KINDS!r}; got {str(pattern)[:60]!r}")
    return pattern


def _nemotron_h(cfg: dict[str, Any], layers: int, name: str) -> dict[str, Any]:
    """Nemotron-H's ModelSpec fields: its block pattern, the Mamba2 mixers' shape in the GDN fields
    (``ModelSpec.block_pattern``), their temporal state's dtype (vLLM's NemotronH config hook: the
    config's ``mamba_ssm_cache_dtype``, else float32), relu2 MLPs and experts (not gated)."""
    pattern = _nemotron_pattern(cfg, layers, name)
    for key in ("n_groups", "ssm_state_size", "mamba_num_heads", "mamba_head_dim", "conv_kernel"):
        if not isinstance(cfg.get(key), int) or isinstance(cfg.get(key), bool) or cfg[key] < 1:
            raise ValueError(f"{name}: config.json {key}={cfg.get(key)!r}; need an integer >= 1")
    ssm_dtype = cfg.get("mamba_ssm_cache_dtype") or "float32"
    if ssm_dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"{name}: config.json mamba_ssm_cache_dtype={ssm_dtype!r}; valid: float32, bfloat16, float16")
    latent = cfg.get("moe_latent_size") or 0
    if not isinstance(latent, int) or isinstance(latent, bool) or latent < 0:
        raise ValueError(f"{name}: config.json moe_latent_size={latent!r}; need null or an integer >= 1")
    return {"block_pattern": pattern, "mlp_gated": False, "attn_output_gate": False, "moe_latent_size": latent,
            "linear_attention_flags": tuple(c == "M" for c in pattern),
            "linear_num_key_heads": cfg["n_groups"], "linear_key_head_dim": cfg["ssm_state_size"],
            "linear_num_value_heads": cfg["mamba_num_heads"], "linear_value_head_dim": cfg["mamba_head_dim"],
            "linear_conv_kernel_dim": cfg["conv_kernel"], "mamba_ssm_dtype": ssm_dtype}


def _sliding(cfg: dict[str, Any], layers: int) -> tuple[int, int]:
    window = int(cfg.get("sliding_window") or 0)
    if not window or cfg.get("use_sliding_window") is False:
        return 0, 0
    types = cfg.get("layer_types")
    if types:
        return window, sum(1 for t in types if t == "sliding_attention")
    return window, layers  # Mistral-style: every layer windowed
