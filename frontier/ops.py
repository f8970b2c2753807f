"""Operator specs: the shard of one operator that ONE GPU rank runs in one forward step.

Every spec is a frozen, hashable dataclass, so predictors can memoize on it. Shapes are
already divided by the parallel layout (TP slices heads and GEMM widths, EP slices
experts); a spec never needs to know the layout. Each spec states its own work as
`flops` and `bytes_moved` (HBM traffic, or bytes on the wire for `CommOp`), which is
what the roofline cost model consumes; learned predictors use the raw fields instead.

Families (`family` class attribute) match the profile partitions: "linear",
"attention", "moe", "elementwise", "comm"; and "gdn" (the gated delta rule of Gated DeltaNet
layers), which the roofline prices (its constants fitted on AIConfigurator's measured tables),
and "lora" (vLLM's punica LoRA kernels), which only the roofline prices (no measured tables);
"encoder_attention": a vision tower's bidirectional attention within each image.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Union

from frontier.quant import METHODS as QUANT_METHODS

COMPUTE_DTYPES = ("bf16", "fp8", "fp4")
# a GEMM may also run in fp32 on CUDA cores (MiniMax-M2's router: fp32 weights, vLLM F.linear in fp32)
GEMM_COMPUTE_DTYPES = COMPUTE_DTYPES + ("fp32",)
COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
COMM_LINKS = ("nvlink", "pcie", "network")
GDN_CHUNK_TOKENS = 64    # the chunked gated-delta-rule prefill's chunk (FLA's and FlashInfer's BT = 64)


def _check_positive(cls: str, **fields: float) -> None:
    for name, value in fields.items():
        if value <= 0:
            raise ValueError(f"{cls}.{name} must be > 0, got {value}")


@dataclass(frozen=True)
class GemmOp:
    """Y[m, n] = X[m, k] @ W[k, n] on one rank; m tokens, n and k already sharded.

    `weight_bytes_per_param` covers quantized weights (incl. scales); `compute_dtype`
    selects the tensor-core rate ("fp8" for fp8 W8A8 models, "bf16" for weight-only), or
    "fp32" for an fp32 GEMM on CUDA cores (MiniMax-M2's router).
    """

    family: ClassVar[str] = "linear"
    name: str
    m: int
    n: int
    k: int
    weight_bytes_per_param: float = 2.0
    act_bytes: float = 2.0
    compute_dtype: str = "bf16"

    def __post_init__(self) -> None:
        _check_positive("GemmOp", m=self.m, n=self.n, k=self.k,
                        weight_bytes_per_param=self.weight_bytes_per_param, act_bytes=self.act_bytes)
        if self.compute_dtype not in GEMM_COMPUTE_DTYPES:
            raise ValueError(f"GemmOp.compute_dtype={self.compute_dtype!r}; valid: {GEMM_COMPUTE_DTYPES}")

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def bytes_moved(self) -> float:
        """Weights read once + activations in and out."""
        return (self.n * self.k * self.weight_bytes_per_param
                + (self.m * self.k + self.m * self.n) * self.act_bytes)


@dataclass(frozen=True)
class AttentionOp:
    """Attention of one layer on one rank over a (possibly mixed) batch.

    Keeps the per-request length distribution: prefill requests by (new tokens,
    context already in KV), decode requests by context length (1 new token each).
    MLA (`is_mla`): the KV cache is one latent of `kv_lora_rank + qk_rope_head_dim`
    per token, shared by all heads and not split by TP; `head_dim` is then the
    effective QK dim and `v_head_dim` the value dim used for the FLOP count.
    """

    family: ClassVar[str] = "attention"
    prefill_new: tuple[int, ...]
    prefill_ctx: tuple[int, ...]
    decode_ctx: tuple[int, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    kv_bytes_per_elem: float = 2.0
    act_bytes: float = 2.0
    is_mla: bool = False
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        if len(self.prefill_new) != len(self.prefill_ctx):
            raise ValueError(f"AttentionOp: {len(self.prefill_new)} prefill_new vs "
                             f"{len(self.prefill_ctx)} prefill_ctx; lengths must match")
        _check_positive("AttentionOp", num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                        head_dim=self.head_dim)
        if self.is_mla and self.kv_lora_rank <= 0:
            raise ValueError(f"AttentionOp.is_mla needs kv_lora_rank > 0, got {self.kv_lora_rank}")

    @property
    def num_tokens(self) -> int:
        return sum(self.prefill_new) + len(self.decode_ctx)

    @property
    def num_reqs(self) -> int:
        return len(self.prefill_new) + len(self.decode_ctx)

    @property
    def _kv_bytes_per_token(self) -> float:
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_bytes_per_elem
        return 2 * self.num_kv_heads * self.head_dim * self.kv_bytes_per_elem

    @property
    def _flops_per_pair(self) -> float:
        """FLOPs per (query token, key token) pair: QK^T plus PV, all heads."""
        v_dim = self.v_head_dim if self.v_head_dim else self.head_dim
        return 2.0 * self.num_heads * (self.head_dim + v_dim)

    @property
    def flops(self) -> float:
        # causal prefill: token i of n new attends to ctx + i + 1 keys -> n*ctx + n(n+1)/2 pairs
        pairs = sum(n * c + n * (n + 1) / 2 for n, c in zip(self.prefill_new, self.prefill_ctx))
        pairs += sum(self.decode_ctx) + len(self.decode_ctx)
        return self._flops_per_pair * pairs

    @property
    def bytes_moved(self) -> float:
        """KV read (context + new), KV write (new), Q in and O out."""
        kv_tokens = sum(self.prefill_ctx) + sum(self.prefill_new) + sum(self.decode_ctx) + len(self.decode_ctx)
        return self._bytes_of(self.num_tokens, kv_tokens)

    def _bytes_of(self, new: int, kv_tokens: int) -> float:
        v_dim = self.v_head_dim if self.v_head_dim else self.head_dim
        qo = new * self.num_heads * (self.head_dim + v_dim) * self.act_bytes
        return (kv_tokens + new) * self._kv_bytes_per_token + qo

    def decode_work(self, num_reqs: int, ctx_sum: int) -> tuple[float, float]:
        """(flops, bytes_moved) of an op with this op's heads, dims and bytes over decode
        requests only: ``num_reqs`` of them, contexts summing to ``ctx_sum`` tokens. The same
        floats as that op's ``flops`` and ``bytes_moved`` (both depend on the contexts only
        through their count and sum), without building it; this op's own requests are ignored."""
        pairs = ctx_sum + num_reqs
        return self._flops_per_pair * pairs, self._bytes_of(num_reqs, pairs)


@dataclass(frozen=True)
class MoeOp:
    """Routed experts of one MoE layer on one rank (gate_up + act + down, fused).

    `tokens` is what enters the layer on this rank; `routed_pairs` the (token, expert)
    assignments this rank computes. `tokens_per_expert` (length `num_local_experts`)
    gives the routed load per local expert; None means balanced routing.

    The layer's sharding, which picks the profiled kernel row a calibrated bundle prices the
    op from (calibration.features): `moe_tp` the tensor-parallel size of the experts
    (`inter` is already divided by it), `moe_ep` the expert-parallel size (None: inferred
    as num_experts / num_local_experts), `quant_method` the experts' weight format
    (frontier.quant.METHODS; None: inferred from compute_dtype and weight bytes).
    """

    family: ClassVar[str] = "moe"
    tokens: int
    num_experts: int
    num_local_experts: int
    topk: int
    hidden: int
    inter: int
    routed_pairs: int
    weight_bytes_per_param: float = 2.0
    act_bytes: float = 2.0
    compute_dtype: str = "bf16"
    tokens_per_expert: tuple[int, ...] | None = None
    moe_tp: int = 1
    moe_ep: int | None = None
    quant_method: str | None = None
    gated: bool = True      # gate_up + act-and-mul + down; False: up + act + down (Nemotron-H's relu2 experts)

    def __post_init__(self) -> None:
        _check_positive("MoeOp", tokens=self.tokens, num_experts=self.num_experts,
                        num_local_experts=self.num_local_experts, topk=self.topk,
                        hidden=self.hidden, inter=self.inter, moe_tp=self.moe_tp)
        if self.moe_ep is not None and (self.moe_ep < 1 or -(-self.num_experts // self.moe_ep)
                                        != self.num_local_experts):
            raise ValueError(f"MoeOp.moe_ep={self.moe_ep} does not give num_local_experts="
                             f"{self.num_local_experts} of num_experts={self.num_experts} (need ceil(E / ep))")
        if self.quant_method is not None and self.quant_method not in QUANT_METHODS:
            raise ValueError(f"MoeOp.quant_method={self.quant_method!r}; valid: {QUANT_METHODS} or None")
        if self.tokens_per_expert is not None and len(self.tokens_per_expert) != self.num_local_experts:
            raise ValueError(f"MoeOp.tokens_per_expert has {len(self.tokens_per_expert)} entries; "
                             f"need num_local_experts={self.num_local_experts}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"MoeOp.compute_dtype={self.compute_dtype!r}; valid: {COMPUTE_DTYPES}")

    @property
    def active_experts(self) -> int:
        if self.tokens_per_expert is not None:
            return sum(1 for t in self.tokens_per_expert if t > 0)
        return min(self.num_local_experts, self.routed_pairs)

    @property
    def matrices(self) -> int:
        """Weight matrices an expert holds: gate, up, down (3), or up, down (2: not gated)."""
        return 3 if self.gated else 2

    @property
    def flops(self) -> float:
        return 2.0 * self.matrices * self.hidden * self.inter * self.routed_pairs   # gate_up 4hI (up 2hI) + down 2hI

    @property
    def bytes_moved(self) -> float:
        weights = self.active_experts * self.matrices * self.hidden * self.inter * self.weight_bytes_per_param
        acts = self.routed_pairs * (2 * self.hidden + self.matrices * self.inter) * self.act_bytes
        return weights + acts


@dataclass(frozen=True)
class ElementwiseOp:
    """Memory-bound op (norm, rotary, activation, sampler): `bytes_per_token` read+written."""

    family: ClassVar[str] = "elementwise"
    name: str
    tokens: int
    hidden: int
    bytes_per_token: float

    def __post_init__(self) -> None:
        _check_positive("ElementwiseOp", tokens=self.tokens, hidden=self.hidden,
                        bytes_per_token=self.bytes_per_token)

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes_moved(self) -> float:
        return self.tokens * self.bytes_per_token


GDN_KERNELS = ("delta_rule", "conv1d", "ssd")


@dataclass(frozen=True)
class GdnOp:
    """One of the two batch-shaped kernels of a Gated DeltaNet layer on one rank over a (possibly
    mixed) batch, ``kernel``: "delta_rule", the gated delta rule (vLLM's ``qwen_gdn_attention_core``
    after its conv1d: the chunked scan for prefill sequences, the recurrent update for decodes), or
    "conv1d", the causal conv1d before it (``causal_conv1d_fn`` for prefills,
    ``causal_conv1d_update`` for decodes) over the conv_dim = 2 x nk x dk + nv x dv channels with a
    ``conv_kernel``-wide window: it reads and writes each token's channels and each sequence's conv
    state of conv_kernel - 1 rows at ``act_bytes``, 2 x conv_kernel FLOPs a channel and token; or
    "ssd", a Mamba2 mixer's state-space scan (vLLM's ``mamba_chunk_scan_combined`` for prefills,
    ``selective_state_update`` for decodes; Nemotron-H), in the same shapes (nk = n_groups, dk =
    the state size, nv = heads, dv = head dim) and counted with the delta rule's work (no table
    times it: the roofline prices it as the delta rule).
    Shapes per rank: ``num_value_heads`` (nv) and
    ``num_key_heads`` (nk) already divided by TP, head dims ``key_head_dim`` (dk) and
    ``value_head_dim`` (dv); each sequence's temporal state is nv x dk x dv elements of
    ``state_bytes_per_elem`` (4 for Qwen3.5's fp32 ``mamba_ssm_dtype``).

    ``prefill_new``: the new tokens of each sequence the chunked kernel runs; ``num_decodes``:
    the requests the recurrent kernel runs, one token each plus ``spec_tokens`` draft tokens
    among them (speculative decoding's verify: the kernel stores the state after every token,
    vLLM keeps them for the rollback).

    FLOPs (leading terms, per value head): a prefill token 4 x dk x dv (state update and
    output) + 2 x GDN_CHUNK_TOKENS x (dk + dv) (attention inside its 64-token chunk); a
    recurrent token 4 x dk x dv. Bytes: every sequence's state read once and written once (a
    verify's drafts write one more state each), and per token q, k (nk x dk each), v (nv x dv),
    g and beta (nv each) read and the output (nv x dv) written at ``act_bytes``.
    """

    family: ClassVar[str] = "gdn"
    prefill_new: tuple[int, ...]
    num_decodes: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    num_key_heads: int
    state_bytes_per_elem: float = 4.0
    act_bytes: float = 2.0
    spec_tokens: int = 0
    kernel: str = "delta_rule"
    conv_kernel: int = 4

    def __post_init__(self) -> None:
        _check_positive("GdnOp", num_value_heads=self.num_value_heads, key_head_dim=self.key_head_dim,
                        value_head_dim=self.value_head_dim, num_key_heads=self.num_key_heads,
                        state_bytes_per_elem=self.state_bytes_per_elem, act_bytes=self.act_bytes,
                        conv_kernel=self.conv_kernel)
        if self.kernel not in GDN_KERNELS:
            raise ValueError(f"GdnOp: kernel={self.kernel!r}; valid: {', '.join(GDN_KERNELS)}")
        if self.num_decodes < 0 or self.spec_tokens < 0 or (self.prefill_new and min(self.prefill_new) < 1):
            raise ValueError(f"GdnOp: num_decodes={self.num_decodes} and spec_tokens={self.spec_tokens} must be "
                             f">= 0 and every prefill_new >= 1")

    @property
    def num_tokens(self) -> int:
        return sum(self.prefill_new) + self.num_decodes + self.spec_tokens

    def kernel_parts(self) -> tuple[GdnOp, ...]:
        """The op as one op per kernel: its prefill part and its decode part (the chunked and the
        recurrent kernels, or the two conv1d ones: they run one after the other); itself when it
        has one kind of sequence."""
        if not self.prefill_new or not self.num_decodes:
            return (self,)
        return (dataclasses.replace(self, num_decodes=0, spec_tokens=0), dataclasses.replace(self, prefill_new=()))

    @property
    def state_bytes(self) -> float:
        """One sequence's temporal state on this rank: nv x dk x dv x state bytes."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim * self.state_bytes_per_elem

    @property
    def prefill_work(self) -> tuple[float, float]:
        """(FLOPs, bytes) of the chunked kernel over the prefill sequences (0, 0 without any)."""
        dk, dv = self.key_head_dim, self.value_head_dim
        tokens = sum(self.prefill_new)
        flops = self.num_value_heads * tokens * (4.0 * dk * dv + 2.0 * GDN_CHUNK_TOKENS * (dk + dv))
        return flops, 2 * len(self.prefill_new) * self.state_bytes + tokens * self._bytes_per_token

    @property
    def recurrent_work(self) -> tuple[float, float]:
        """(FLOPs, bytes) of the recurrent kernel over the decodes (and a verify's drafts)."""
        tokens = self.num_decodes + self.spec_tokens
        flops = self.num_value_heads * tokens * 4.0 * self.key_head_dim * self.value_head_dim
        states = 2 * self.num_decodes + self.spec_tokens
        return flops, states * self.state_bytes + tokens * self._bytes_per_token

    @property
    def _bytes_per_token(self) -> float:
        """q, k (nk x dk each), v (nv x dv), g and beta (nv each) read, the output (nv x dv) written."""
        nk, nv = self.num_key_heads, self.num_value_heads
        return (2 * nk * self.key_head_dim + 2 * nv * self.value_head_dim + 2 * nv) * self.act_bytes

    @property
    def conv_dim(self) -> int:
        """The conv1d's channels on this rank: q and k (nk x dk each) and v (nv x dv)."""
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim

    @property
    def conv_work(self) -> tuple[float, float]:
        """(FLOPs, bytes) of the conv1d: every token's channels and every sequence's conv state
        (conv_kernel - 1 rows) read and written."""
        rows = self.num_tokens + (self.conv_kernel - 1) * (len(self.prefill_new) + self.num_decodes)
        return 2.0 * self.conv_kernel * self.conv_dim * self.num_tokens, rows * 2.0 * self.conv_dim * self.act_bytes

    @property
    def flops(self) -> float:
        if self.kernel == "conv1d":
            return self.conv_work[0]
        return self.prefill_work[0] + self.recurrent_work[0]

    @property
    def bytes_moved(self) -> float:
        """The delta rule: states read + written, q/k/v/g/beta in and the output out; the conv1d:
        ``conv_work``."""
        if self.kernel == "conv1d":
            return self.conv_work[1]
        return self.prefill_work[1] + self.recurrent_work[1]


MOE_A2A_PHASES = ("dispatch", "combine")
MOE_A2A_OPS = tuple(f"moe_{phase}" for phase in MOE_A2A_PHASES)   # their profile rows' op_name


@dataclass(frozen=True)
class MoeA2a:
    """What an MoE dispatch or combine kernel (vLLM's --all2all-backend: DeepEP, ...) moves, beyond
    its bytes: `phase` ("dispatch" sends each token's hidden state to the ranks of its experts,
    "combine" brings the weighted results back), `kernel` (the --all2all-backend name), `tokens`
    (the tokens this rank dispatches; the busiest rank's under lockstep DP), `hidden_size`,
    `topk` (experts per token) and `num_experts` (all experts of the layer)."""

    phase: str
    kernel: str
    tokens: int
    hidden_size: int
    topk: int
    num_experts: int

    def __post_init__(self) -> None:
        if self.phase not in MOE_A2A_PHASES:
            raise ValueError(f"MoeA2a.phase={self.phase!r}; valid: {MOE_A2A_PHASES}")
        _check_positive("MoeA2a", tokens=self.tokens, hidden_size=self.hidden_size, topk=self.topk,
                        num_experts=self.num_experts)


@dataclass(frozen=True)
class CommOp:
    """A collective or transfer. `bytes` is the tensor size per rank (all_reduce: the
    reduced tensor; all_gather: the gathered output; reduce_scatter: the input; all_to_all:
    what one rank sends; p2p: the message).

    Placement: `ranks_per_node` 0 = flat on `link` ("network": one rank per node;
    "nvlink"/"pcie": the whole group in one node). `ranks_per_node` > 0 = the group's ranks
    sit that many per node, `link` is the intra-node link and nodes talk over the network
    (priced hierarchically by `simulator.comm`).

    `moe`: set on an all_to_all that is an MoE dispatch or combine kernel (`MoeA2a`), which a
    comm backend with measured tables of that kernel prices from its tokens and shape.
    """

    family: ClassVar[str] = "comm"
    kind: str
    bytes: float
    group_size: int
    link: str = "nvlink"
    ranks_per_node: int = 0
    moe: MoeA2a | None = None

    def __post_init__(self) -> None:
        if self.kind not in COMM_KINDS:
            raise ValueError(f"CommOp.kind={self.kind!r}; valid: {COMM_KINDS}")
        if self.moe is not None and self.kind != "all_to_all":
            raise ValueError(f"CommOp.moe is set on a {self.kind!r}; an MoE dispatch / combine is an all_to_all")
        if self.link not in COMM_LINKS:
            raise ValueError(f"CommOp.link={self.link!r}; valid: {COMM_LINKS}")
        _check_positive("CommOp", bytes=self.bytes, group_size=self.group_size)
        if self.ranks_per_node < 0 or (self.ranks_per_node and self.group_size % self.ranks_per_node):
            raise ValueError(f"CommOp.ranks_per_node={self.ranks_per_node} must be 0 or divide "
                             f"group_size={self.group_size}")

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes_moved(self) -> float:
        return self.bytes


@dataclass(frozen=True)
class LoraOp:
    """One of vLLM's punica LoRA kernels (triton ``lora_shrink`` / ``lora_expand``) on one rank,
    over m tokens each on its own adapter, ``num_loras`` adapters among them.

    kind "shrink": buf[m, slices x rank] = x[m, k] @ A (each of ``slices`` slices its own A of
    [k, rank]; fp32 buffer); kind "expand": y[m, n] += buf @ B, n the slices' outputs summed (B of
    [rank, n] per adapter). The kernel reads the A (or B) of every adapter in the batch once.
    """

    family: ClassVar[str] = "lora"
    name: str
    kind: str
    m: int
    k: int
    n: int
    rank: int
    slices: int
    num_loras: int
    weight_bytes_per_param: float = 2.0
    act_bytes: float = 2.0

    def __post_init__(self) -> None:
        _check_positive("LoraOp", m=self.m, k=self.k, n=self.n, rank=self.rank, slices=self.slices,
                        num_loras=self.num_loras)
        if self.kind not in ("shrink", "expand"):
            raise ValueError(f"LoraOp.kind={self.kind!r}; valid: shrink, expand")

    @property
    def flops(self) -> float:
        if self.kind == "shrink":
            return 2.0 * self.m * self.k * self.rank * self.slices
        return 2.0 * self.m * self.rank * self.n

    @property
    def bytes_moved(self) -> float:
        """The batch's adapters' A (or B) once + the input and output (the fp32 buffer between
        the two kernels; expand reads and writes y)."""
        buf = self.m * self.rank * self.slices * 4.0
        if self.kind == "shrink":
            return self.num_loras * self.slices * self.rank * self.k * self.weight_bytes_per_param + (
                self.m * self.k * self.act_bytes + buf)
        return self.num_loras * self.rank * self.n * self.weight_bytes_per_param + buf + 2 * self.m * self.n * self.act_bytes


@dataclass(frozen=True)
class EncoderAttentionOp:
    """A vision tower block's attention on one rank (vLLM's ViT flash attention, varlen): each image
    attends to itself, bidirectionally, ``seq_lens`` its patches; ``num_heads`` (already divided by
    TP) of ``head_dim``; q, k, v read and the output written at ``act_bytes``.

    FLOPs: 4 x heads x head_dim x p^2 per image (QK^T and PV over all p x p pairs). Bytes: 4 x p x
    heads x head_dim x act_bytes per image.
    """

    family: ClassVar[str] = "encoder_attention"
    seq_lens: tuple[int, ...]
    num_heads: int
    head_dim: int
    act_bytes: float = 2.0

    def __post_init__(self) -> None:
        _check_positive("EncoderAttentionOp", num_heads=self.num_heads, head_dim=self.head_dim,
                        act_bytes=self.act_bytes)
        if not self.seq_lens or min(self.seq_lens) < 1:
            raise ValueError(f"EncoderAttentionOp: seq_lens={self.seq_lens}; need one length >= 1 per image")

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lens)

    @property
    def pairs(self) -> int:
        """Query-key pairs: the sum of p^2 over the images."""
        return sum(p * p for p in self.seq_lens)

    def uniform_parts(self) -> tuple[EncoderAttentionOp, ...]:
        """The op as one op per distinct image length (longest first): the uniform batches a
        calibrated bundle prices (its measured rows are uniform) and sums."""
        lengths = sorted(set(self.seq_lens), reverse=True)
        if len(lengths) == 1:
            return (self,)
        return tuple(dataclasses.replace(self, seq_lens=(p,) * self.seq_lens.count(p)) for p in lengths)

    @property
    def flops(self) -> float:
        return 4.0 * self.num_heads * self.head_dim * self.pairs

    @property
    def bytes_moved(self) -> float:
        return 4.0 * self.num_tokens * self.num_heads * self.head_dim * self.act_bytes


OpSpec = Union[GemmOp, AttentionOp, MoeOp, ElementwiseOp, GdnOp, CommOp, LoraOp, EncoderAttentionOp]
