"""Batch engine: one scheduled step (one forward pass) -> its duration on one rank.

A step is ONE forward however mixed (DESIGN.md §2): every GEMM sees the step's total
tokens, so weights are read once per step; attention sees each request's own new
tokens and context. The step is priced as the op list of ONE rank:

    per decoder layer (ops built once per layer *type*, then multiplied by the layer count):
      input_norm, QKV GEMM(s), [MiniMax-M2's TP-wide q/k norm: variance all-reduce at TP > 1
      and its kernels], rotary, attention, [output gate], o_proj, [TP all-reduce], post_norm,
      dense MLP (gate_up, act, down) | MoE (router (fp32 for MiniMax-M2), routed experts,
      shared experts, [dispatch/combine when DP>1]), [TP all-reduce]
      a Gated DeltaNet layer (Qwen3.5 / Qwen3-Next) has, in place of QKV .. o_proj:
      in_proj_qkvz, in_proj_ba, conv1d, gated delta rule (GdnOp), gated norm, out_proj
    once: embedding, final_norm; lm_head + sampler over the sampled rows (eager).

Shapes: GEMM/norm/comm ops run at `padded_tokens` when the step hits a CUDA graph
(FULL or PIECEWISE), at the real token count when eager. Attention always sees the
real requests (PIECEWISE keeps it eager; the padded rows of a FULL decode graph have
no context and are ignored), and so does a Gated DeltaNet layer's core (conv1d + gated
delta rule: vLLM's ``qwen_gdn_attention_core``, a CUDA-graph splitting op like attention).

Timing modes: FULL -> every layer op "kernel"; PIECEWISE -> captured ops "kernel",
attention "launch"; NONE -> all "launch". lm_head + sampler run after the graph and
are always "launch".

Approximations (stated, to be replaced by measured data / later models):
- Sampled rows = number of requests in the step (a chunked prefill that does not end
  its prompt also samples in vLLM and the token is discarded; spec-decode verify rows
  are not counted separately).
- Pipeline parallel: ``step_cost`` is the sum of stage times (= all layers) + (pp - 1)
  activation sends; ``stage_times_s`` splits that sum into the pp stages (layers as
  vLLM's ``get_pp_indices`` assigns them, the embedding on stage 0, the final norm,
  lm_head and sampler on the last stage, each p2p send on its sending stage) so the
  replica can overlap steps across stages (``simulator.pipeline``).
- MoE routing: balanced unless a skewed `MoeRouter` is given (simulator/moe_routing.py):
  then every distinct load of an EP rank that receives pairs is priced and the slowest
  rank's MoeOp kept. With DP>1 all DP ranks' tokens reach the experts (dp x the rank's
  tokens when the ranks pad to the busiest, their sum when not: ``lockstep_costs``): all2all_backend
  (vLLM's --all2all-backend name) priced as one of two shapes (``engine_args.ALL2ALL_PRICED_AS``):
  "allgather_reducescatter" (vLLM's default: all_gather + reduce_scatter over TP x DP) or a
  dispatch + combine kernel (DeepEP, ...; EP > 1): two all_to_all of the busiest rank's routed
  tokens over the EP group, each tagged with what the kernel moves (``MoeA2a``: the rank's
  tokens, hidden size, top-k), which the calibrated comm backend prices from measured DeepEP
  tables (``simulator.comm.moe_a2a``).
- Collectives run over packed groups (ranks fill a node first); larger ones go hierarchical.
- MLA prefill is priced un-absorbed (MHA on qk_nope+rope / v dims), decode absorbed
  (latent dims); the kv_b up-projection of prefill context is not priced.
- Gated DeltaNet layers: the gated delta rule (``GdnOp``) is priced by the roofline alone, with
  constants fitted on AIConfigurator's measured vLLM 0.24 GDN tables (``simulator.cost_model``;
  no profile of ours times it, nor a bundle); a prefill's small kernels around the chunked scan
  (q/k l2norm and gating prep, state gather and scatter) are not counted, nor the full-attention
  layers' q/k norms beyond the fused norm + RoPE + gate kernel.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable

from frontier.gpu import is_sm100_family
from frontier.ops import MOE_A2A_PHASES, AttentionOp, CommOp, ElementwiseOp, GdnOp, GemmOp, MoeA2a, MoeOp
from frontier.parallel import ParallelSpec
from frontier.quant import LM_HEAD
from simulator.comm.group import intra_node_link
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.engine_args import ALL2ALL_PRICED_AS
from simulator.lora import LORA_PRICING_NOTE, LoraConfig, lora_head_ops, lora_layer_ops
from simulator.multimodal import deal_images, encoder_all_reduces, encoder_ops, output_tokens
from simulator.spec_decode import SpecDecodeConfig, drafter_note
from simulator.vllm_version import (BF16X3_ROUTER, DP_PAD_GRAPHS_ONLY, MINIMAX_FUSED_QK_NORM, MINIMAX_GATE_LINEAR,
                                    SEMANTICS, moe_dp_chunk_note, moe_kernel_note)

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from frontier.model_spec import ModelSpec
    from simulator.cost_model import CostModel
    from simulator.moe_routing import MoeRouter

BF16 = 2.0
FP32 = 4.0
VOCAB_PADDING = 64            # vLLM DEFAULT_VOCAB_PADDING_SIZE
FP32_ROUTER_MAX_TOKENS = 32   # vLLM >= 0.23 GateLinear.FP32_MAX_TOKENS: the dedicated fp32 router kernel
MINIMAX_QK_NORM_MAX_TOKENS = 2048   # vLLM >= 0.23 MINIMAX_QK_NORM_MAX_TOKEN_NUM: the fused AR + q/k norm kernel
SAMPLER_FP32_PASSES = 3       # logits -> fp32, softmax/probs, sample: ~3 passes over rows x vocab fp32
MAX_CACHE_ENTRIES = 200_000   # step memo bound; cleared (not LRU) when exceeded
# ... and a bound on the requests its BatchShape keys hold: decode shapes (context lengths grow
# every step) almost never repeat, and 200k keys of ~100 requests each held GBs at 1k GPUs.
MAX_CACHE_REQS = 400_000
# Quantized weights whose GEMMs vLLM runs with quantized activations: (compute dtype, the least
# compute capability with those tensor cores). Below it vLLM falls back to a weight-only Marlin
# kernel, bf16 math on the fp8 / fp4 weights (0.33: kernels/linear/scaled_mm/marlin.py "FP8
# Marlin kernel for GPUs that lack FP8 hardware support", sm 7.5+; kernels/linear/nvfp4/marlin.py
# "Your GPU does not have native support for FP4 computation"): an FP8 checkpoint on an A100, an
# NVFP4 one on an H100. mxfp4 / int4_wo are weight-only everywhere (bf16 math).
_QUANT_COMPUTE = {"fp8": ("fp8", 89), "fp8_block": ("fp8", 89), "nvfp4": ("fp4", 100)}


def quant_compute_dtype(method: str, weight_bytes_per_param: float, sm_version: int) -> str:
    """The compute dtype of a GEMM / MoE whose weights are ``method`` (``weight_bytes_per_param``
    of them; 2.0 = unquantized) on a GPU of ``sm_version``: "fp8" / "fp4" where its tensor cores run
    the quantized math, else "bf16" (weight-only, ``_QUANT_COMPUTE``)."""
    if weight_bytes_per_param >= BF16 or method not in _QUANT_COMPUTE:
        return "bf16"
    dtype, min_sm = _QUANT_COMPUTE[method]
    return dtype if sm_version >= min_sm else "bf16"


@dataclass(frozen=True)
class BatchShape:
    """Tokens scheduled this step per request, and tokens already in KV before it.

    Speculative decoding (else 0): ``num_drafts``, the drafts the step verifies (each adds a
    logits row); ``draft_passes``, the drafter's forwards after the step (k, or 0 when vLLM skips
    drafting: ``BatchEngine.draft_time_s``). LoRA (else 0): ``num_loras``, the distinct adapters
    of the step's requests (``simulator.lora``). Images (else empty): ``encoder_patches``, the
    patches of each image the vision tower encodes in the step (``simulator.multimodal``)."""

    new_tokens: tuple[int, ...]
    context_lens: tuple[int, ...]
    num_drafts: int = 0
    draft_passes: int = 0
    num_loras: int = 0
    encoder_patches: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.new_tokens or len(self.new_tokens) != len(self.context_lens):
            raise ValueError(f"BatchShape needs equal, non-empty new_tokens ({len(self.new_tokens)}) "
                             f"and context_lens ({len(self.context_lens)})")
        if min(self.new_tokens) < 1 or min(self.context_lens) < 0:
            raise ValueError(f"BatchShape: new_tokens must be >= 1 and context_lens >= 0; got min "
                             f"{min(self.new_tokens)}, {min(self.context_lens)}")

    @classmethod
    def of_step(cls, new_tokens: tuple[int, ...], context_lens: tuple[int, ...],
                num_drafts: int = 0, draft_passes: int = 0, num_loras: int = 0,
                encoder_patches: tuple[int, ...] = ()) -> BatchShape:
        """A scheduler's step (non-empty, aligned, every request >= 1 new token: what
        ``__post_init__`` checks holds by construction), built without the per-step checks."""
        b = object.__new__(cls)
        object.__setattr__(b, "new_tokens", new_tokens)
        object.__setattr__(b, "context_lens", context_lens)
        object.__setattr__(b, "num_drafts", num_drafts)
        object.__setattr__(b, "draft_passes", draft_passes)
        object.__setattr__(b, "num_loras", num_loras)
        object.__setattr__(b, "encoder_patches", encoder_patches)
        return b

    @property
    def num_tokens(self) -> int:
        return sum(self.new_tokens)

    @property
    def num_reqs(self) -> int:
        return len(self.new_tokens)


@dataclass(frozen=True)
class StepCost:
    """Duration of one step on the slowest rank, in seconds."""

    duration_s: float
    num_tokens: int
    padded_tokens: int
    cudagraph_mode: str   # "FULL" | "PIECEWISE" | "NONE"


def pp_layer_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as vLLM's ``get_pp_indices`` (no VLLM_PP_LAYER_PARTITION).

    The remainder goes one layer each to the stages before the last, counting back from
    the second-to-last: 32 layers / 3 stages -> [11, 11, 10]; 80 / 3 -> [27, 27, 26].
    """
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def window_pieces(new: tuple[int, ...], ctx: tuple[int, ...], window: int
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A step's (new tokens, context) per request as a sliding-window layer computes them.

    A query at position p attends keys (p - window, p]: min(p + 1, window) of them, and the
    attention kernel skips the rest. A decode (1 new token) becomes (1, min(ctx, window - 1)).
    A prefill chunk of n > 1 tokens becomes pieces, each priced as its L queries on X context
    tokens, query j attending X + j + 1 keys: the part inside the first window as it is (X = ctx,
    exact), the rest in pieces of at most ``window`` queries, each with X = window - (L + 1) // 2
    so that its queries attend ``window`` keys on average, as they do. Without this an 8k-token
    prefill of gpt-oss (window 128) priced its sliding layers as full causal attention over 8k
    tokens (~32x their work).
    """
    out_new: list[int] = []
    out_ctx: list[int] = []
    for n, c in zip(new, ctx):
        if n == 1:
            out_new.append(1)
            out_ctx.append(min(c, window - 1))
            continue
        start, end = c, c + n
        if start < window:
            first = min(n, window - start)
            out_new.append(first)
            out_ctx.append(start)
            start += first
        while start < end:
            length = min(window, end - start)
            out_new.append(length)
            out_ctx.append(window - (length + 1) // 2)
            start += length
    return tuple(out_new), tuple(out_ctx)


def chunk_pieces(new: tuple[int, ...], ctx: tuple[int, ...], chunk: int
                 ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A step's (new tokens, context) per request as a chunked local-attention layer (Llama 4)
    computes them: a query at position p attends the keys of its own ``chunk``-token chunk up to
    p, [p // chunk x chunk, p]. A decode becomes (1, ctx % chunk); a prefill piece crossing chunk
    boundaries splits at them, each part on the context of its chunk before it (exact: vLLM's
    local-attention virtual batches run each chunk's part as a request of its own)."""
    out_new: list[int] = []
    out_ctx: list[int] = []
    for n, c in zip(new, ctx):
        start, end = c, c + n
        while start < end:
            offset = start % chunk
            length = min(end - start, chunk - offset)
            out_new.append(length)
            out_ctx.append(offset)
            start += length
    return tuple(out_new), tuple(out_ctx)


def pricing_notes(engines: Iterable[BatchEngine]) -> list[str]:
    """The distinct ``pricing_notes`` of ``engines`` in order of first appearance: a run's summary
    line for the kernels its release runs that no table times (and what a multimodal checkpoint's
    run leaves out, ``ModelSpec.vision_encoder_note``)."""
    return list(dict.fromkeys(note for engine in engines for note in engine.pricing_notes))


def mode_timings(mode: str) -> tuple[str, str]:
    """(dense ops' timing, attention's timing) of a step in CUDA-graph ``mode`` (module docstring):
    FULL -> "kernel", "kernel"; PIECEWISE -> "kernel", "launch"; NONE -> "launch", "launch"."""
    return ("launch" if mode == "NONE" else "kernel"), ("kernel" if mode == "FULL" else "launch")


def min_graph_mode(modes: set[str]) -> str:
    """The lowest of the CUDA-graph modes (NONE < PIECEWISE < FULL): what ranks stepping together run."""
    return "NONE" if "NONE" in modes else "PIECEWISE" if "PIECEWISE" in modes else "FULL"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BatchEngine:
    """Prices steps for one replica: model x parallel layout x GPU x cost model x graphs."""

    def __init__(self, model: ModelSpec, parallel: ParallelSpec, gpu: GpuSpec,
                 cost_model: CostModel, cudagraph: CudaGraphConfig, moe_router: MoeRouter | None = None,
                 all2all_backend: str = "allgather_reducescatter",
                 vllm_version: tuple[int, int] = SEMANTICS, spec: SpecDecodeConfig | None = None,
                 draft_model: ModelSpec | None = None, lora: LoraConfig | None = None) -> None:
        """``vllm_version``: (major, minor) of the release whose model kernels to price
        (``simulator.vllm_version``: MiniMax-M2's router and q/k norm); ``spec``: speculative
        decoding's drafter (``draft_time_s``), None without; ``draft_model``: with ``spec``'s
        method draft_model, the draft model as served (``ResolvedEngine.draft_model``), priced by
        an engine of its own at this TP size (``standalone_draft_time_s``); ``lora``: --enable-lora's
        adapters, whose kernels a step with adapters pays (``simulator.lora``), None without."""
        if (spec is not None and spec.method == "draft_model") != (draft_model is not None):
            raise ValueError("draft_model goes with a speculative config of method draft_model, and only with one")
        parallel.check_model(model)
        if model.num_linear_attention_layers and (model.linear_num_key_heads % parallel.tp
                                                  or model.linear_num_value_heads % parallel.tp):
            kind = ("Mamba2 layers (n_groups, heads)" if model.block_pattern else "Gated DeltaNet layers")
            raise ValueError(f"tp={parallel.tp} must divide the {model.linear_num_key_heads} key and "
                             f"{model.linear_num_value_heads} value heads of {model.name}'s {kind}")
        if all2all_backend not in ALL2ALL_PRICED_AS:
            raise ValueError(f"all2all_backend={all2all_backend!r}; valid: {', '.join(ALL2ALL_PRICED_AS)}")
        if moe_router is not None and moe_router.ep != parallel.ep:
            raise ValueError(f"moe_router.ep={moe_router.ep} must equal parallel.ep={parallel.ep}")
        self.model, self.parallel, self.gpu = model, parallel, gpu
        self.cost_model, self.cudagraph = cost_model, cudagraph
        self.moe_router, self.all2all_backend = moe_router, all2all_backend
        self._dispatch_combine = ALL2ALL_PRICED_AS[all2all_backend] == "all_to_all"
        self.vllm_version = vllm_version
        self.spec = spec
        self._draft = (BatchEngine(draft_model, ParallelSpec(tp=parallel.tp), gpu, cost_model, cudagraph,
                                   vllm_version=vllm_version) if draft_model is not None else None)
        self._draft_cache: dict[tuple[int, str], float] = {}
        self._draft_head_cache: dict[int, float] = {}
        self.lora = lora
        self._lora_cache: dict[tuple[int, int, int, str], float] = {}
        # a kernel this release runs that the calibrated tables do not time (the price stays theirs)
        note = (moe_kernel_note(vllm_version, gpu.sm_version, model.quant.method_of("routed_experts"), parallel.moe_tp,
                                parallel.ep)
                if model.num_moe_layers and model.quant.bytes_per_param("routed_experts") < BF16 else None)
        chunks = (moe_dp_chunk_note(vllm_version, all2all_backend, parallel.dp, parallel.ep)
                  if model.num_moe_layers else None)
        drafter = drafter_note(spec) if spec is not None else None
        self.pricing_notes: tuple[str, ...] = tuple(
            n for n in (note, chunks, drafter, model.vision_encoder_note(), lora and LORA_PRICING_NOTE) if n) + (
            self._draft.pricing_notes if self._draft is not None else ())
        self._tp, self._q = parallel.tp, cudagraph.uniform_decode_query_len
        in_node = parallel.world_size <= gpu.gpus_per_node
        self._intra_link = intra_node_link(gpu)
        self._pp_link = self._intra_link if in_node else "network"
        self._ab = model.quant.activation_bytes
        self._step_cache: dict[BatchShape, StepCost] = {}
        self._cache_reqs = 0          # requests in the step memo's keys (MAX_CACHE_REQS)
        self._last_uniform: tuple[BatchShape, StepCost] | None = None   # the latest uniform decode step
        self._stage_cache: dict[BatchShape, tuple[float, ...]] = {}
        self._dense_cache: dict[tuple[int, str, int | None], float] = {}
        self._head_cache: dict[int, float] = {}
        self._gdn_decode_cache: dict[tuple[int, str], float] = {}   # (decodes, timing): GDN layers' time
        # decode-only attention priced from the contexts' count and sum (attention_time_s): the
        # roofline's attention time depends on nothing else; a calibrated model may (it sees
        # the context distribution), and sliding-window layers see clipped contexts
        self._gdn_layers = model.num_linear_attention_layers
        self._attn_layers = model.num_attention_layers - model.num_sliding_layers - model.num_chunked_layers
        one_group = (self._attn_layers > 0 and not (model.sliding_window and model.num_sliding_layers)
                     and not model.num_chunked_layers)
        # the vision tower (images): split by TP (weights mode), or whole on every rank (data mode,
        # or a tower TP does not divide: ModelSpec.vision_bytes_per_rank)
        self._encoder_split = model.vision_params_sharded > 0 and not (model.vision_num_heads
                                                                       and model.vision_num_heads % self._tp)
        self._encoder_cache: dict[tuple[int, ...], float] = {}
        self._decode_attn = (self._attention_for((1,), (0,))[0]
                             if type(cost_model) is RooflineCostModel and one_group else None)

    # ---- public ---------------------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        """Pipeline stages (pp); the replica overlaps steps across them when > 1."""
        return self.parallel.pp

    def step_cost(self, batch: BatchShape) -> StepCost:
        """The step's cost, memoized. A uniform decode step (every request
        ``uniform_decode_query_len`` new tokens) is memoized for the latest such shape only:
        context lengths grow every step, so these shapes almost never repeat and hashing
        them into the memo costs more than it saves."""
        new = batch.new_tokens
        num_tokens, num_reqs = sum(new), len(new)
        uniform = new.count(self._q) == num_reqs
        if uniform:
            last = self._last_uniform
            if last is not None and (last[0] is batch or last[0] == batch):
                return last[1]
        else:
            cached = self._step_cache.get(batch)
            if cached is not None:
                return cached
        mode, padded = self.cudagraph.dispatch(num_tokens, num_reqs, uniform)
        dense_timing, attn_timing = mode_timings(mode)
        duration = (self._dense_time_s(padded, dense_timing)
                    + self._attention_time_s(batch, attn_timing)
                    + self._head_time_s(num_reqs))
        if batch.num_drafts or batch.draft_passes:
            duration += self._spec_time_s(batch, mode, padded)
        if batch.num_loras:
            duration += self._lora_time_s(padded, num_reqs, batch.num_loras, dense_timing)
        if batch.encoder_patches:
            duration += self.encoder_time_s(batch.encoder_patches)
        cost = StepCost(duration, num_tokens, padded, mode)
        if uniform:
            self._last_uniform = (batch, cost)
            return cost
        if len(self._step_cache) >= MAX_CACHE_ENTRIES or self._cache_reqs >= MAX_CACHE_REQS:
            self._step_cache.clear()
            self._stage_cache.clear()
            self._cache_reqs = 0
        self._step_cache[batch] = cost
        self._cache_reqs += num_reqs
        return cost

    def lockstep_costs(self, batches: list[BatchShape], num_idle: int) -> list[StepCost]:
        """Costs of the busy ranks of one lockstep DP step (``simulator.dp_group``; the step lasts
        as long as the slowest); ``num_idle`` ranks run a one-token dummy batch.

        Padded: every rank runs the largest padded token count M of the ranks in their minimum
        CUDA-graph mode (vLLM re-dispatches each rank at M within the synced mode: a FULL decode
        rank beside a PIECEWISE one runs PIECEWISE), so a rank costs the dense layers at M, its
        MoE layers over dp x M, plus its own attention and head. vLLM pads so from 0.17 when
        every rank's mode is not NONE, before 0.17 whenever CUDA graphs are configured
        (``simulator.vllm_version``; 0.12-0.16's rule, also taken for 0.10-0.11, which padded
        unless ``--enforce-eager``, a cudagraph_mode of NONE included; a rank running eager then
        makes M eager for all).

        Unpadded (a rank runs eager from 0.17, or graphs are off): every rank runs eager on its
        own tokens, and its MoE layers (and their all-gather / reduce-scatter) see the sum over
        the ranks, as ``all_gatherv`` gathers them."""
        costs = [self.step_cost(b) for b in batches]
        if self.parallel.dp == 1 or not self.model.num_moe_layers:
            return costs
        if self.vllm_version >= DP_PAD_GRAPHS_ONLY:
            padded = all(c.cudagraph_mode != "NONE" for c in costs)
        else:
            padded = not (self.cudagraph.enforce_eager or self.cudagraph.mode == "NONE")
        if padded:
            return self._padded_costs(batches, costs)
        total = sum(c.padded_tokens for c in costs) + num_idle
        out = []
        for b, c in zip(batches, costs):
            m = c.padded_tokens
            duration = (self._dense_time_s(m, "launch", total) + self._attention_time_s(b, "launch")
                        + self._head_time_s(len(b.new_tokens)) + self._spec_time_s(b, "NONE", m)
                        + (self.encoder_time_s(b.encoder_patches) if b.encoder_patches else 0.0))
            out.append(StepCost(duration, c.num_tokens, m, "NONE"))
        return out

    def _padded_costs(self, batches: list[BatchShape], costs: list[StepCost]) -> list[StepCost]:
        """``lockstep_costs`` of ranks padded to the largest padded count in their minimum mode;
        a rank already at that count and mode keeps its ``step_cost``. A rank whose attention
        timing stays the same reuses its attention time (its cost less its dense and head)."""
        big = max(c.padded_tokens for c in costs)
        mode = min_graph_mode({c.cudagraph_mode for c in costs})
        if all(c.padded_tokens == big and c.cudagraph_mode == mode for c in costs):
            return costs
        dense_timing, attn_timing = mode_timings(mode)
        dense = self._dense_time_s(big, dense_timing)
        out = []
        for b, c in zip(batches, costs):
            if c.padded_tokens == big and c.cudagraph_mode == mode:
                out.append(c)
                continue
            head = self._head_time_s(len(b.new_tokens))
            own_dense_timing, own_attn_timing = mode_timings(c.cudagraph_mode)
            if attn_timing == own_attn_timing:
                attention = (c.duration_s - self._dense_time_s(c.padded_tokens, own_dense_timing) - head
                             - self._spec_time_s(b, c.cudagraph_mode, c.padded_tokens))
            else:
                attention = self._attention_time_s(b, attn_timing)
            out.append(StepCost(dense + attention + head + self._spec_time_s(b, mode, big), c.num_tokens, big, mode))
        return out

    def stage_times_s(self, batch: BatchShape, cost: StepCost | None = None) -> tuple[float, ...]:
        """The step's duration split into its pp stages (seconds); the sum equals ``step_cost``,
        or ``cost`` when given (a lockstep rank's unpadded cost, ``lockstep_costs``).

        Every decoder layer costs the same (per-layer share of the step's layer ops and
        attention; an approximation where layers differ: a Gated DeltaNet hybrid's GDN and
        full-attention layers, sliding-window and dense / MoE layers); stage s holds
        ``pp_layer_partition`` layers, plus the embedding (s = 0), the final norm + lm_head +
        sampler (last stage; with speculative decoding also the verified drafts' logits and the
        drafter, which reads the last stage's hidden states) and one p2p send of the hidden
        states and residual (every stage but the last). pp = 1: ``(duration_s,)``.
        """
        own = self.step_cost(batch)
        given = cost is not None and cost != own
        cost = cost if given else own
        pp = self.parallel.pp
        if pp == 1:
            return (cost.duration_s,)
        memo = not given and batch.new_tokens.count(self._q) != len(batch.new_tokens)   # as step_cost's memo
        cached = self._stage_cache.get(batch) if memo else None
        if cached is not None:
            return cached
        mode, m = cost.cudagraph_mode, cost.padded_tokens
        timing = mode_timings(mode)[0]
        h, ab = self.model.hidden_size, self._ab
        embed, final_norm, p2p = self.cost_model.op_times_s(
            [ElementwiseOp("embedding", m, h, 2 * h * ab), ElementwiseOp("final_norm", m, h, 2 * h * ab),
             CommOp("p2p", 2 * m * h * ab, 2, self._pp_link)], timing)
        head = self._head_time_s(len(batch.new_tokens))
        spec = self._spec_time_s(batch, mode, m)    # speculative decoding: on the last stage, with the head
        vision = self.encoder_time_s(batch.encoder_patches) if batch.encoder_patches else 0.0   # the first stage's
        per_layer = ((cost.duration_s - embed - final_norm - (pp - 1) * p2p - head - spec - vision)
                     / self.model.num_layers)
        parts = pp_layer_partition(self.model.num_layers, pp)
        stages = [n * per_layer + p2p for n in parts]
        stages[0] += embed + vision
        stages[-1] += final_norm + head + spec - p2p
        out = tuple(stages)
        if not memo:
            return out
        if len(self._stage_cache) >= MAX_CACHE_ENTRIES:
            self._stage_cache.clear()
        self._stage_cache[batch] = out
        return out

    def layer_ops(self, m: int, moe_tokens: int | None = None) -> list[tuple[object, int]]:
        """(op, multiplicity) for every op of a forward over m tokens but attention and the Gated
        DeltaNet cores (``gdn_ops``): attention GEMMs x the full-attention layers, GDN projections
        and gated norm x the GDN layers, norms / all-reduces x every layer, MLP / MoE x their
        layers; ``moe_tokens``: the tokens the MoE layers gather over the DP ranks (None: dp x m,
        every rank padded to m)."""
        mdl, par, ab, tp = self.model, self.parallel, self._ab, self._tp
        h, n_layers = mdl.hidden_size, mdl.num_layers
        heads = mdl.num_attention_heads // tp
        sublayers = 1 if mdl.block_pattern else 2      # a block pattern's layer: one mixer or one MLP / MoE
        ops: list[tuple[object, int]] = [
            (ElementwiseOp("embedding", m, h, 2 * h * ab), 1),
            (ElementwiseOp("final_norm", m, h, 2 * h * ab), 1),
            (ElementwiseOp("input_norm", m, h, 4 * h * ab), n_layers),     # fused residual add + RMSNorm
        ]
        if sublayers == 2:
            ops.append((ElementwiseOp("post_norm", m, h, 4 * h * ab), n_layers))
        if mdl.norms_per_layer == 4:    # Gemma 2 / 3: post-attention and post-feedforward RMSNorms, no residual
            ops.append((ElementwiseOp("sandwich_norm", m, h, 2 * h * ab), 2 * n_layers))
        n_attn, n_gdn = mdl.num_attention_layers, mdl.num_linear_attention_layers
        if n_attn:
            ops += [(op, n_attn) for op in self._attn_gemms(m, heads)]
        if n_gdn:
            ops += [(op, n_gdn) for op in (self._mamba2_gemms(m) if mdl.block_pattern else self._gdn_gemms(m))]
        if tp > 1:
            ops.append((self._comm("all_reduce", m * h * ab, tp), sublayers * n_layers))
        n_dense = mdl.num_mlp_layers
        if n_dense:
            inter = _cdiv(mdl.intermediate_size, tp)
            ops += [(op, n_dense) for op in self._mlp_ops("dense_mlp", "mlp", m, inter)]
        if mdl.num_moe_layers:
            ops += [(op, mdl.num_moe_layers) for op in self._moe_ops(m, moe_tokens)]
        if par.pp > 1:
            ops.append((CommOp("p2p", 2 * m * h * ab, 2, self._pp_link), par.pp - 1))  # hidden + residual
        return ops

    # ---- pieces -----------------------------------------------------------------------------
    def _gemm(self, name: str, m: int, n: int, k: int, part: str | None) -> GemmOp:
        q = self.model.quant
        wb = q.bytes_per_param(part) if part else BF16
        return GemmOp(name, m, n, k, wb, self._ab, quant_compute_dtype(q.method_of(part) if part else "none", wb,
                                                                       self.gpu.sm_version))

    def _attn_gemms(self, m: int, heads: int) -> list[object]:
        """A full-attention layer's ops but attention over m tokens. With an output gate
        (``attn_output_gate``, Qwen3.5 / Qwen3-Next) qkv_proj also yields a gate per q element,
        one fused kernel (vLLM ``fused_qk_rmsnorm_rope_gate``, priced as "rotary") reads q + gate
        and k and writes q, k and the gate, and the attention output is multiplied by
        sigmoid(gate) before o_proj ("attn_gate": reads output and gate, writes the product)."""
        mdl, h, ab = self.model, self.model.hidden_size, self._ab
        if not mdl.is_mla:
            kv = max(1, mdl.num_kv_heads // self._tp)
            d = mdl.head_dim
            if mdl.attn_output_gate:
                return [self._gemm("qkv_proj", m, (2 * heads + 2 * kv) * d, h, "attention"),
                        ElementwiseOp("rotary", m, h, 2 * (2 * heads + kv) * d * ab),
                        ElementwiseOp("attn_gate", m, h, 3 * heads * d * ab),
                        self._gemm("o_proj", m, h, heads * d, "attention")]
            ops = [self._gemm("qkv_proj", m, (heads + 2 * kv) * d, h, "attention"),
                   ElementwiseOp("rotary", m, h, 2 * (heads + kv) * d * ab),
                   self._gemm("o_proj", m, h, heads * d, "attention")]
            if mdl.tp_wide_qk_norm:
                ops[1:1] = self._tp_wide_qk_norm_ops(m, (heads + kv) * d)
            return ops
        qk = mdl.qk_nope_head_dim + mdl.qk_rope_head_dim
        ops: list[object] = []
        if mdl.q_lora_rank:
            ops += [self._gemm("q_a_proj", m, mdl.q_lora_rank, h, "attention"),
                    self._gemm("q_b_proj", m, heads * qk, mdl.q_lora_rank, "attention")]
        else:
            ops.append(self._gemm("mla_q_proj", m, heads * qk, h, "attention"))
        ops += [self._gemm("kv_a_proj", m, mdl.kv_lora_rank + mdl.qk_rope_head_dim, h, "attention"),
                ElementwiseOp("mla_norms", m, h, 2 * (mdl.q_lora_rank + mdl.kv_lora_rank) * ab),
                self._gemm("kv_b_proj", m, heads * (mdl.qk_nope_head_dim + mdl.v_head_dim),
                           mdl.kv_lora_rank, "attention"),
                self._gemm("mla_o_proj", m, h, heads * mdl.v_head_dim, "attention")]
        return ops

    def _gdn_gemms(self, m: int) -> list[object]:
        """A Gated DeltaNet layer's ops over m tokens outside its core (vLLM
        QwenGatedDeltaNetAttention, inside the CUDA graphs): in_proj_qkvz (hidden -> (2 x key_dim
        + 2 x value_dim) / tp), in_proj_ba (hidden -> 2 x value heads / tp), the gated RMSNorm
        over value_dim / tp (reads the core's output and z, writes the gated output) and out_proj
        (value_dim / tp -> hidden); key_dim = key heads x key head dim, value_dim likewise."""
        mdl, tp, ab, h = self.model, self._tp, self._ab, self.model.hidden_size
        value = mdl.linear_value_dim // tp
        return [self._gemm("in_proj_qkvz", m, (2 * mdl.linear_key_dim + 2 * mdl.linear_value_dim) // tp, h,
                           "linear_attention"),
                self._gemm("in_proj_ba", m, 2 * mdl.linear_num_value_heads // tp, h, "linear_attention"),
                ElementwiseOp("gdn_norm", m, value, 3 * value * ab),
                self._gemm("out_proj", m, h, value, "linear_attention")]

    def _mamba2_gemms(self, m: int) -> list[object]:
        """A Mamba2 mixer's ops over m tokens outside its conv1d and scan (vLLM MambaMixer2): in_proj
        (hidden -> z, x, B, C, dt: 2 x intermediate + 2 x n_groups x state + heads, / tp), the gated
        RMSNorm over intermediate / tp (reads the scan's output and z, writes the normed product)
        and out_proj (intermediate / tp -> hidden); intermediate = heads x head dim."""
        mdl, tp, ab, h = self.model, self._tp, self._ab, self.model.hidden_size
        inter = mdl.linear_value_dim // tp
        width = (2 * mdl.linear_value_dim + 2 * mdl.linear_key_dim + mdl.linear_num_value_heads) // tp
        return [self._gemm("mamba_in_proj", m, width, h, "linear_attention"),
                ElementwiseOp("mamba_norm", m, inter, 3 * inter * ab),
                self._gemm("mamba_out_proj", m, h, inter, "linear_attention")]

    def _mlp_ops(self, part: str, prefix: str, m: int, inter: int) -> list[object]:
        h = self.model.hidden_size
        if not self.model.mlp_gated:        # up, the activation (Nemotron-H's relu2), down
            return [self._gemm(f"{prefix}_up_proj", m, inter, h, part),
                    ElementwiseOp(f"{prefix}_relu2", m, inter, 2 * inter * self._ab),
                    self._gemm(f"{prefix}_down_proj", m, h, inter, part)]
        return [self._gemm(f"{prefix}_gate_up_proj", m, 2 * inter, h, part),
                ElementwiseOp(f"{prefix}_act", m, inter, 3 * inter * self._ab),
                self._gemm(f"{prefix}_down_proj", m, h, inter, part)]

    def _moe_ops(self, m: int, moe_tokens: int | None = None) -> list[object]:
        mdl, par, ab = self.model, self.parallel, self._ab
        e = mdl.num_experts
        h = mdl.moe_latent_size or mdl.hidden_size      # the routed tokens' width (latent MoE: projected first)
        local = par.local_experts(e)
        slots = e + par.redundant_experts   # the layer's expert weight sets (EPLB adds replicas)
        tokens = m * par.dp if moe_tokens is None else moe_tokens   # DP ranks' tokens gathered to the experts
        wb = mdl.quant.bytes_per_param("routed_experts")
        method = mdl.quant.method_of("routed_experts")
        dtype = quant_compute_dtype(method, wb, self.gpu.sm_version)
        inter = _cdiv(mdl.moe_intermediate_size, par.moe_tp)
        # the layer's sharding and weight format: which profiled kernel row prices the op
        shard = {"moe_tp": par.moe_tp, "moe_ep": par.ep, "quant_method": method}
        router = self.moe_router
        if router is None or router.balanced:   # every rank holds ceil(pairs / ep) pairs
            pairs = _cdiv(tokens * mdl.num_experts_per_tok * local, e)
            experts = MoeOp(tokens, slots, local, mdl.num_experts_per_tok, h, inter, max(pairs, 1), wb, ab, dtype,
                            **shard, gated=mdl.mlp_gated)
        else:   # price every distinct load of a rank that has pairs (an idle rank is not the slowest)
            ranks = [MoeOp(tokens, slots, local, mdl.num_experts_per_tok, h, inter, sum(r), wb, ab, dtype, r,
                           **shard, gated=mdl.mlp_gated) for r in dict.fromkeys(router.rank_loads(tokens)) if any(r)]
            times = self.cost_model.op_times_s(ranks, "kernel")
            experts = ranks[max(range(len(ranks)), key=times.__getitem__)]
            pairs = max(op.routed_pairs for op in ranks)   # the busiest receiver of the all_to_all
        ops: list[object] = [*self._router_ops(m), experts]
        if mdl.moe_latent_size:     # Nemotron 3 Super / Ultra: the rank's tokens projected to the latent before
            full = mdl.hidden_size  # the dispatch and back after the combine, replicated bf16 linears (ModelOpt
            ops[-1:-1] = [GemmOp("moe_latent_in", m, h, full, BF16, ab)]    # leaves them unquantized)
            ops.append(GemmOp("moe_latent_out", m, full, h, BF16, ab))
        shared = mdl.num_shared_experts * mdl.shared_expert_intermediate_size
        if shared:
            ops += self._mlp_ops("shared_experts", "shared", m, _cdiv(shared, self._tp))
        if par.dp > 1 and par.ep > 1 and self._dispatch_combine:
            routed = max(pairs, 1) * h * ab     # the busiest rank's routed tokens, in and back out
            ops += [self._comm("all_to_all", routed, par.ep,
                               MoeA2a(phase, self.all2all_backend, m, h, mdl.num_experts_per_tok, e))
                    for phase in MOE_A2A_PHASES]
        elif par.dp > 1:
            group = par.tp * par.dp
            ops += [self._comm("all_gather", tokens * h * ab, group),
                    self._comm("reduce_scatter", tokens * h * ab, group)]
        return ops

    def _tp_wide_qk_norm_ops(self, m: int, width: int) -> list[object]:
        """MiniMax-M2's q/k RMSNorm over m tokens (``width``: q and k elements per token on this
        rank). The norm spans the whole TP-sharded projection, so at TP > 1 each token's q and k
        variances ([m, 2] fp32) are all-reduced. From vLLM 0.23 (``minimax_rms_norm``), at TP > 1
        and up to ``MINIMAX_QK_NORM_MAX_TOKENS`` tokens, one fused Lamport kernel does the
        reduction and the norm: priced as the all-reduce. Otherwise, and at every size before
        0.23 (``MiniMaxText01RMSNormTP.forward_qk`` in torch ops), two kernels run around it:
        the variances (reads q and k) and the apply (reads them, writes them)."""
        ops: list[object] = []
        if self._tp > 1:
            ops.append(self._comm("all_reduce", m * 2 * FP32, self._tp))
            if m <= MINIMAX_QK_NORM_MAX_TOKENS and self.vllm_version >= MINIMAX_FUSED_QK_NORM:
                return ops
        ab = self._ab
        return [ElementwiseOp("qk_norm_var", m, width, width * ab), *ops,
                ElementwiseOp("qk_norm_apply", m, width, 2 * width * ab)]

    def _router_ops(self, m: int) -> list[object]:
        """The MoE router GEMM over m tokens as vLLM runs it (``self.vllm_version``).

        A bf16 router is one bf16 GEMM. An fp32 router (MiniMax-M2: fp32 weights, fp32 logits)
        casts the tokens to fp32 and runs ``F.linear`` in fp32: an SGEMM on CUDA cores (vLLM sets
        float32 matmul precision "highest": no TF32), which is what a prefill chunk pays on
        Hopper (8,192 tokens of MiniMax-M2: 12.9 GFLOP per layer, ~0.26 ms on an H200). Before
        vLLM 0.23 that runs at every size on every GPU (``self.gate(hidden_states.to(
        torch.float32))``). From 0.23 (``GateLinear``), up to ``FP32_ROUTER_MAX_TOKENS`` tokens on
        sm_90 and sm_100-family GPUs, a dedicated fp32 kernel takes it (memory bound: the fp32
        weights read once); from 0.26 the sm_100 family (B200, B300, GB200) runs the bf16x3
        CuteDSL GEMM above that (three bf16 products of the split operands on tensor cores:
        priced as one bf16 GEMM three times as wide)."""
        mdl, ab, version = self.model, self._ab, self.vllm_version
        h, e = mdl.hidden_size, mdl.num_experts
        if mdl.router_dtype == "bf16":
            return [GemmOp("router", m, e, h, BF16, ab)]
        sm100 = is_sm100_family(self.gpu.sm_version)
        if version >= MINIMAX_GATE_LINEAR:
            if (sm100 or self.gpu.sm_version == 90) and m <= FP32_ROUTER_MAX_TOKENS:
                return [GemmOp("router", m, e, h, FP32, ab, "fp32")]
            if sm100 and version >= BF16X3_ROUTER:
                return [GemmOp("router_bf16x3", m, 3 * e, h, BF16, ab)]
        return [ElementwiseOp("router_cast", m, h, (ab + FP32) * h), GemmOp("router", m, e, h, FP32, FP32, "fp32")]

    def _comm(self, kind: str, nbytes: float, size: int, moe: MoeA2a | None = None) -> CommOp:
        """A collective over `size` consecutive ranks: flat in one node, else hierarchical."""
        per_node = self.gpu.gpus_per_node
        if size <= per_node:
            return CommOp(kind, nbytes, size, self._intra_link, moe=moe)
        return CommOp(kind, nbytes, size, self._intra_link, math.gcd(size, per_node), moe)

    def _times(self, ops: list[tuple[object, int]], timing: str) -> float:
        times = self.cost_model.op_times_s([op for op, _ in ops], timing)
        return sum(t * n for t, (_, n) in zip(times, ops))

    def _dense_time_s(self, m: int, timing: str, moe_tokens: int | None = None) -> float:
        key = (m, timing, moe_tokens)
        t = self._dense_cache.get(key)
        if t is None:
            if len(self._dense_cache) >= MAX_CACHE_ENTRIES:
                self._dense_cache.clear()
            t = self._dense_cache[key] = self._times(self.layer_ops(m, moe_tokens), timing)
        return t

    def _lora_time_s(self, m: int, rows: int, num_loras: int, timing: str) -> float:
        """The LoRA kernels of a step of m (padded) tokens and ``rows`` sampled rows whose
        requests run ``num_loras`` adapters: the decoder layers' and the embedding's in the step's
        ``timing`` (``simulator.lora.lora_layer_ops``), the lm_head's eager (launch), as the head
        runs (``lora_head_ops``)."""
        key = (m, rows, num_loras, timing)
        t = self._lora_cache.get(key)
        if t is None:
            rank = self.lora.max_lora_rank
            layers = lora_layer_ops(self.model, self._tp, m, num_loras, rank, self._ab)
            head = lora_head_ops(self.model, rows, num_loras, rank, self._ab)
            if len(self._lora_cache) >= MAX_CACHE_ENTRIES:
                self._lora_cache.clear()
            t = self._lora_cache[key] = self._times(layers, timing) + self._times(head, "launch")
        return t

    def encoder_time_s(self, patches: tuple[int, ...]) -> float:
        """The vision tower over images of ``patches`` patches each, eager (launch timing), on the
        busiest rank (``simulator.multimodal``: weights mode split by TP with its all-reduces; data
        mode, or a tower TP cannot split, the busiest rank's share of the images and an all-gather
        of the tokens); memoized."""
        t = self._encoder_cache.get(patches)
        if t is not None:
            return t
        tower, tp = self.model.vision, self._tp
        if self._encoder_split:
            t = self._times(encoder_ops(tower, patches, tp), "launch")
            if tp > 1:
                t += self._times([(self._comm("all_reduce", nbytes, tp), n)
                                  for nbytes, n in encoder_all_reduces(tower, patches)], "launch")
        else:
            busiest = max(deal_images(patches, tp), key=sum)
            t = self._times(encoder_ops(tower, busiest, 1), "launch")
            if tp > 1:
                t += self._times([(self._comm("all_gather", 2.0 * output_tokens(tower, patches) * tower.out_hidden,
                                              tp), 1)], "launch")
        if len(self._encoder_cache) >= MAX_CACHE_ENTRIES:
            self._encoder_cache.clear()
        self._encoder_cache[patches] = t
        return t

    def _head_time_s(self, rows: int) -> float:
        t = self._head_cache.get(rows)
        if t is None:
            t = self._head_cache[rows] = self._logits_time_s(rows, self.model.vocab_size)
        return t

    def _draft_head_time_s(self, rows: int) -> float:
        """The draft head's logits and sampling over ``rows`` rows (its own vocabulary when known)."""
        t = self._draft_head_cache.get(rows)
        if t is None:
            vocab = self.spec.draft_vocab_size or self.model.vocab_size
            t = self._draft_head_cache[rows] = self._logits_time_s(rows, vocab)
        return t

    def _logits_time_s(self, rows: int, vocab_size: int) -> float:
        """lm_head GEMM over ``vocab_size`` (padded), the sampler, and with TP the logits'
        all-gather, for ``rows`` rows (eager: launch timing)."""
        mdl, ab = self.model, self._ab
        vocab = _cdiv(vocab_size, VOCAB_PADDING) * VOCAB_PADDING
        ops: list[tuple[object, int]] = [
            (self._gemm("lm_head", rows, _cdiv(vocab, self._tp), mdl.hidden_size, LM_HEAD), 1),
            (ElementwiseOp("sampler", rows, vocab_size, SAMPLER_FP32_PASSES * 4 * vocab_size), 1)]
        if self._tp > 1:   # logits gathered to rank 0
            ops.append((self._comm("all_gather", rows * vocab * ab, self._tp), 1))
        return self._times(ops, "launch")

    def _spec_time_s(self, batch: BatchShape, mode: str, padded: int) -> float:
        """Speculative decoding's share of a step run in CUDA-graph ``mode`` at ``padded`` tokens:
        the logits rows of the verified drafts and the drafter's passes (0 without either)."""
        if not (batch.num_drafts or batch.draft_passes):
            return 0.0
        rows = len(batch.new_tokens)
        t = self._head_time_s(rows + batch.num_drafts) - self._head_time_s(rows)
        return t + self.draft_time_s(batch, mode, padded) if batch.draft_passes else t

    def draft_time_s(self, batch: BatchShape, mode: str, padded: int) -> float:
        """The drafter's work after a step (seconds; ``simulator.spec_decode``): a forward of the
        draft head over the step's tokens in the step's CUDA-graph ``mode`` at its ``padded``
        count, then ``draft_passes`` - 1 forwards over one token per request (the speculator's own
        decode graphs: ``_draft_decode_dispatch``), each with draft logits for one row per
        request. Attention sees each request's context, growing by one a pass. A draft model:
        ``standalone_draft_time_s`` of its engine."""
        new, ctx = batch.new_tokens, batch.context_lens
        if self._draft is not None:
            return self._draft.standalone_draft_time_s(new, ctx, batch.draft_passes)
        rows = len(new)
        dense_timing, attn_timing = mode_timings(mode)
        t = (self._draft_layer_time_s(padded, dense_timing) + self._times(
            [(op, 1) for op in self._attention_for(new, ctx)], attn_timing) + self._draft_head_time_s(rows))
        if batch.draft_passes > 1:
            mode, padded = self._draft_decode_dispatch(rows)
            dense_timing, attn_timing = mode_timings(mode)
            per_pass = self._draft_layer_time_s(padded, dense_timing) + self._draft_head_time_s(rows)
            ends, ones = [n + c for n, c in zip(new, ctx)], (1,) * rows
            for j in range(batch.draft_passes - 1):
                ops = self._attention_for(ones, tuple([e + j for e in ends]))
                t += per_pass + self._times([(op, 1) for op in ops], attn_timing)
        return t

    def standalone_draft_time_s(self, new: tuple[int, ...], ctx: tuple[int, ...], passes: int) -> float:
        """This engine's model as a draft model after a target step of requests with ``new``
        tokens each on ``ctx`` context tokens (seconds): vLLM 0.33 model runner V2's
        ``StandaloneARSpeculator``, eager (it captures no CUDA graphs: launch timing). Its first
        forward takes each request's tokens plus the sampled one (the expanded buffer: new + 1
        tokens on ctx), then ``passes`` - 1 forwards take one token per request on a context one
        longer each pass; every forward samples one row per request (this model's lm_head and
        sampler). Rejected drafts shorten the contexts by what the step will reject, which is
        not known when the step is priced: the contexts are the accepted-all ones (as the EAGLE
        head's passes)."""
        rows = len(new)
        first = tuple([n + 1 for n in new])
        head = self._head_time_s(rows)
        t = self._dense_time_s(sum(first), "launch") + self.attention_time_s(first, ctx, "launch") + head
        if passes > 1:
            per_pass = self._dense_time_s(rows, "launch") + head
            ends, ones = [n + 1 + c for n, c in zip(new, ctx)], (1,) * rows
            for j in range(passes - 1):
                t += per_pass + self.attention_time_s(ones, tuple([e + j for e in ends]), "launch")
        return t

    def _draft_decode_dispatch(self, rows: int) -> tuple[str, int]:
        """(CUDA-graph mode, padded tokens) of the drafter's one-token passes over ``rows``
        requests: model runner V2's speculator replays its own decode graphs (uniform, one token a
        request: FULL where the mode has FULL graphs, else PIECEWISE) at the smallest capture size
        >= rows; eager above the largest or without graphs."""
        cg = self.cudagraph
        sizes = cg.capture_sizes
        if cg.enforce_eager or cg.mode == "NONE" or not sizes or rows > sizes[-1]:
            return "NONE", rows
        return ("PIECEWISE" if cg.mode == "PIECEWISE" else "FULL"), sizes[bisect.bisect_left(sizes, rows)]

    def _draft_layer_time_s(self, m: int, timing: str) -> float:
        """One forward of the draft head's layer over m tokens (``simulator.spec_decode``): the
        input GEMM folding in the target's states, norms, the target's attention projections (an
        EAGLE-3 layer's QKV projection reads 2 x hidden: vLLM's ``llama_eagle3``), and its MLP,
        or, for an MTP layer of an MoE model, its MoE layer."""
        key = (m, timing)
        t = self._draft_cache.get(key)
        if t is None:
            mdl, ab, tp, spec = self.model, self._ab, self._tp, self.spec
            h = mdl.hidden_size
            ops: list[tuple[object, int]] = [
                (GemmOp("draft_fc", m, h, spec.fc_inputs * h, BF16, ab), 1),
                (ElementwiseOp("draft_norms", m, h, 8 * h * ab), 1)]
            wide = spec.method == "eagle3"     # EAGLE-3's layer projects [embedding, fc(states)]: 2 x hidden in
            ops += [(replace(op, k=2 * h) if wide and op.name == "qkv_proj" else op, 1)
                    for op in self._attn_gemms(m, mdl.num_attention_heads // tp)]
            if tp > 1:
                ops.append((self._comm("all_reduce", m * h * ab, tp), 2))
            if spec.method == "mtp" and mdl.num_moe_layers or not mdl.intermediate_size:
                ops += [(op, 1) for op in self._moe_ops(m)]
            else:
                ops += [(op, 1) for op in self._mlp_ops("dense_mlp", "draft_mlp", m, _cdiv(mdl.intermediate_size, tp))]
            if len(self._draft_cache) >= MAX_CACHE_ENTRIES:
                self._draft_cache.clear()
            t = self._draft_cache[key] = self._times(ops, timing)
        return t

    def attention_ops(self, batch: BatchShape) -> list[tuple[AttentionOp, int]]:
        """(attention op, number of layers) for the step; sliding layers see their window only
        (``window_pieces``), chunked ones their chunk (``chunk_pieces``)."""
        mdl = self.model
        groups = [(batch.new_tokens, batch.context_lens, self._attn_layers)]
        if mdl.sliding_window and mdl.num_sliding_layers:
            groups.append((*window_pieces(batch.new_tokens, batch.context_lens, mdl.sliding_window),
                           mdl.num_sliding_layers))
        if mdl.num_chunked_layers:
            groups.append((*chunk_pieces(batch.new_tokens, batch.context_lens, mdl.attention_chunk_size),
                           mdl.num_chunked_layers))
        out = []
        for new, ctx, n_layers in groups:
            if n_layers:
                out += [(op, n_layers) for op in self._attention_for(new, ctx)]
        return out

    def _attention_for(self, new: tuple[int, ...], ctx: tuple[int, ...]) -> list[AttentionOp]:
        """The attention ops of requests with ``new`` tokens on ``ctx`` context tokens each.
        Speculative decoding: a verify (up to 1 + k tokens on a context) is priced as a decode
        reading its context and new tokens' KV (as a decode of the last one; the other queries'
        compute is not priced: a verify is memory-bound like a decode, and the calibrated
        tables time no prefill this short on a long context)."""
        mdl, tp = self.model, self._tp
        heads, kvb, ab = mdl.num_attention_heads // tp, mdl.quant.kv_bytes_per_elem, self._ab
        if self.spec is not None and max(new) > 1:
            q = self._q
            dec = tuple(c + n - 1 for n, c in zip(new, ctx) if n <= q and c)
            p_new = tuple(n for n, c in zip(new, ctx) if n > q or not c)
            p_ctx = tuple(c for n, c in zip(new, ctx) if n > q or not c)
        elif new.count(1) == len(new):
            dec, p_new, p_ctx = ctx, (), ()
        else:
            dec = tuple(c for n, c in zip(new, ctx) if n == 1)
            p_new = tuple(n for n in new if n != 1)
            p_ctx = tuple(c for n, c in zip(new, ctx) if n != 1)
        if not mdl.is_mla:
            kv = max(1, mdl.num_kv_heads // tp)
            return [AttentionOp(p_new, p_ctx, dec, heads, kv, mdl.head_dim, kvb, ab)]
        latent, rope = mdl.kv_lora_rank, mdl.qk_rope_head_dim
        ops = []
        if p_new:   # un-absorbed MHA prefill
            ops.append(AttentionOp(p_new, p_ctx, (), heads, 1, mdl.qk_nope_head_dim + rope, kvb, ab,
                                   True, latent, rope, mdl.v_head_dim))
        if dec:     # absorbed MQA decode over the latent
            ops.append(AttentionOp((), (), dec, heads, 1, latent + rope, kvb, ab, True, latent, rope, latent))
        return ops

    def gdn_ops(self, new: tuple[int, ...], ctx: tuple[int, ...]) -> list[tuple[object, int]]:
        """(op, number of layers) of the Gated DeltaNet layers' cores for requests with ``new``
        tokens each on ``ctx`` context tokens ([] without GDN layers): the causal conv1d and the
        gated delta rule (``GdnOp``), per rank.

        conv1d: a ``GdnOp`` of kernel "conv1d" over the conv_dim / tp channels (conv_dim = 2 x
        key_dim + value_dim) of T + (K - 1) x S rows read and written: the step's T tokens and each
        of its S sequences' conv state of K - 1 rows (K = conv kernel width). The recurrent kernel runs
        the decodes (1 new token) and, with speculative decoding, the verifies (up to 1 + k tokens
        on a context, as ``_attention_for``): a verify's drafts are ``GdnOp.spec_tokens``; the
        other requests run the chunked prefill."""
        if not self._gdn_layers:
            return []
        mdl, tp, ab, n_layers = self.model, self._tp, self._ab, self._gdn_layers
        spec, q = self.spec is not None, self._q
        prefill = tuple(n for n, c in zip(new, ctx) if n > 1 and not (spec and n <= q and c))
        num_tokens, prefill_tokens = sum(new), sum(prefill)
        num_recurrent = len(new) - len(prefill)
        state = float(mdl.mamba_state_elem_bytes[1])     # bytes a temporal-state element
        core = GdnOp(prefill, num_recurrent, mdl.linear_num_value_heads // tp, mdl.linear_key_head_dim,
                     mdl.linear_value_head_dim, mdl.linear_num_key_heads // tp, state, ab,
                     num_tokens - prefill_tokens - num_recurrent, "ssd" if mdl.block_pattern else "delta_rule")
        conv = replace(core, kernel="conv1d", conv_kernel=mdl.linear_conv_kernel_dim)
        return [(conv, n_layers), (core, n_layers)]

    def _gdn_time_s(self, new: tuple[int, ...], ctx: tuple[int, ...], timing: str) -> float:
        """The Gated DeltaNet layers' cores (``gdn_ops``; seconds, all layers)."""
        if new.count(1) == len(new):
            return self._gdn_decode_time_s(len(new), timing)
        return self._times(self.gdn_ops(new, ctx), timing)

    def _gdn_decode_time_s(self, num_reqs: int, timing: str) -> float:
        """``_gdn_time_s`` of ``num_reqs`` decodes, memoized (their ops depend on nothing else)."""
        key = (num_reqs, timing)
        t = self._gdn_decode_cache.get(key)
        if t is None:
            ones = (1,) * num_reqs
            t = self._gdn_decode_cache[key] = self._times(self.gdn_ops(ones, ones), timing)
        return t

    def decode_attention_time_s(self, num_reqs: int, ctx_sum: int, timing: str) -> float:
        """``attention_time_s`` of ``num_reqs`` decode requests whose contexts sum to ``ctx_sum``
        tokens; only where ``_decode_attn`` is set (the roofline, no sliding-window layers)."""
        flops, nbytes = self._decode_attn.decode_work(num_reqs, ctx_sum)
        t = self.cost_model.attention_time_s(flops, nbytes, timing) * self._attn_layers
        if self._gdn_layers:
            t += self._gdn_decode_time_s(num_reqs, timing)
        return t

    def _attention_time_s(self, batch: BatchShape, timing: str) -> float:
        return self.attention_time_s(batch.new_tokens, batch.context_lens, timing, batch)

    def attention_time_s(self, new: tuple[int, ...], ctx: tuple[int, ...], timing: str,
                         batch: BatchShape | None = None) -> float:
        """Attention time (seconds, all layers) of requests with ``new`` tokens each on ``ctx``
        context tokens (``batch``: the same as a BatchShape, when the caller has one), plus the
        Gated DeltaNet layers' cores (``gdn_ops``). Decode only under the roofline: the op's
        work from the contexts' count and sum (``AttentionOp.decode_work``), the same floats as
        pricing the op built for them."""
        if self._decode_attn is not None and new.count(1) == len(new):
            return self.decode_attention_time_s(len(ctx), sum(ctx), timing)
        ops = self.attention_ops(batch if batch is not None else BatchShape(new, ctx))
        if len(ops) == 1:     # the common case: _times' sum over one op, 0 + t * n, is t * n
            op, n_layers = ops[0]
            t = self.cost_model.op_times_s([op], timing)[0] * n_layers
        else:
            t = self._times(ops, timing)
        if self._gdn_layers:
            t += self._gdn_time_s(new, ctx, timing)
        return t
