"""KV-cache block budget at start-up, as vLLM 0.33 computes it (engine-semantics §2.2), and as
earlier releases did (``--vllm-version``: below).

vLLM 0.33 (vllm/v1/worker/gpu_worker.py `determine_available_memory`, vllm/utils/mem_utils.py
`memory_profiling`, vllm/v1/core/kv_cache_planning.py `get_kv_cache_configs`,
vllm/v1/core/kv_cache_utils.py `get_kv_cache_capacity`):

    requested   = ceil(total_memory * gpu_memory_utilization)      (vllm/v1/worker/utils.py request_memory)
    non_kv      = total_consumed + transient_peak_headroom         (memory_profiling around profile_run)
                ~ weights + non_torch + activation_peak             (our three terms)
    graphs      = profile_cudagraph_memory()  (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the default)
    available   = requested - non_kv - graphs
                  or exactly --kv-cache-memory-bytes when given (profiling is then skipped)
    num_blocks  = available // bytes_per_block ; --num-gpu-blocks-override wins; min over ranks
    logged      "GPU KV cache size: N tokens", N = int(num_blocks / blocks_per_request(L) * L)

KV layout (`kv_layout`, kv_cache_planning.py `get_kv_cache_groups`): each attention layer
reports a spec whose page is block_size * per-token-per-layer bytes (K+V heads max(1, KV//tp),
or the MLA latent on every rank). Layers of one spec type form one group when all layers agree
(one group of every layer: bytes_per_block = layers * page). A hybrid model (full + sliding
window) is split by type into groups of equal size (`_get_kv_cache_groups_uniform_page_size`:
group size = the smaller type's layer count, or the larger one's when it is < 1.5x the
smaller); every group draws from ONE shared block pool whose block spans the largest group:
bytes_per_block = largest group * page (gpt-oss-120b: 18 of 36 layers). With pp, each stage
holds its layers of every group; the stage with the most bytes per block sets num_blocks.
A request at max_model_len L takes, per group, cdiv(L, block) blocks (full attention) or
cdiv(min(W - 1 + in_flight, L), block) + 1 (sliding window W; SlidingWindowSpec
`max_admission_blocks_per_request`), with in_flight = max_num_batched_tokens * concurrent
batches (pp + 1 with async scheduling on model runner V2, the GPU default; pp without).

Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next; `gdn_layout`, vLLM 0.33 on sm_90 and sm_100): each GDN layer
reports a MambaSpec whose page is its per-request state (conv + temporal, `gdn_state_bytes`), and
`Platform._align_hybrid_block_size` (platforms/interface.py) grows the attention block to
A * ceil(state / (A * attention bytes per token)), A = max(16, --block-size), lcm'd with 64 when
prefix caching is on (the "align" mamba mode: FlashInfer's GDN prefill checkpoints every 64
tokens); the state is padded to the attention page. The groups are the uniform-page grouping
above (Qwen3.5: 1 full + 3 mamba groups of L / 4 layers); a request's blocks are ceil(L / block)
for the full group and, per mamba group, 2 + 1 prefill checkpoint (align) or 1 (none), + k
with an MTP drafter of k drafts, whose layer joins the full group and whose tokens add k rows to
the conv state (MambaSpec.max_memory_usage_bytes / page). The same plan on the sm_100 family.
Checked against vLLM's own code on the CPU (tests/oracle/test_gdn_kv_capacity_oracle.py).

The simulator's KV manager gets vLLM's pool (num_blocks). An engine of a model with
sliding-window layers charges every group as vLLM does (`simulator.kv_cache.hybrid`, one block
table per group, blocks before the window freed); with speculative decoding behind a KV connector
(P/D) it charges the full-attention blocks only (cdiv(tokens, block) per request).

Weights come from `ModelSpec.weight_bytes_per_rank` (worst pp stage). The other three terms are
*estimates from the model* unless profiled memory rows replace them (`ProfiledOverheads`, fitted
by calibration/memory_model.py and carried by a bundle):

- non_torch: NCCL / cuBLAS workspaces and the custom all-reduce buffers allocated after the
  start snapshot. vLLM logs "non_torch_memory takes ~0.1 GiB" at TP1 and ~0.5-1.5 GiB with
  TP>1 (NCCL communicators + custom all-reduce IPC buffers): NON_TORCH_TP1_BYTES /
  NON_TORCH_MULTI_GPU_BYTES. A profiled value was measured on one card (no communicators), so
  with TP/PP/DP > 1 the budget adds COMMUNICATOR_BYTES (their difference) to it.
- activation peak of profile_run (one dummy forward over max_num_batched_tokens tokens T,
  then a dummy sampler over min(max_num_seqs, T) rows):
    forward  = T*h*3 (hidden, residual, normed input) + max(qkv out, MLP gate_up + act out,
               fused-MoE caches T*topk*(3*I_moe/ffn_tp + h)) in activation bytes;
    sampler  = T*h (last hidden) + rows*vocab*(2 bf16 logits + 4*SAMPLER_FP32_COPIES) — the
               logits are gathered to full vocab on rank 0 before sampling;
    peak     = max(forward, sampler). A profiled activation is the forward's peak alone (the
               profiler's memory run has no sampler run), so the budget takes the larger of it
               and the sampler estimate.
- cuda graphs (0 when eager): 0.33 (`profile_cudagraph_memory`, vllm/v1/worker/gpu_model_runner.py
  and gpu/cudagraph_utils.py) captures the two largest graphs of each mode (PIECEWISE, FULL)
  into a throwaway pool: estimate = max over modes of the first capture + sum over modes of
  (n - 1) * max(second capture, 1 MiB). We take: first capture = forward activation at the
  largest capture size (or the profiled graph pool at that size), plus
  CUDA_GRAPH_BYTES_PER_LAYER per captured layer for every further graph.

Per vLLM version range, as read from the release wheels:

- 0.10.2 and 0.11.0 (identical `Worker.determine_available_memory`, vllm/v1/worker/gpu_worker.py):
  requested = total * gpu_memory_utilization (a float, no ceil; default 0.9, vllm/config/cache.py);
  non_kv = weights + torch_peak_increase + non_torch_increase (vllm/utils/__init__.py
  memory_profiling); available = requested - non_kv. No CUDA-graph term: graphs are captured
  after the KV cache is allocated (compile_or_warm_up_model), out of the 1 - utilization headroom.
  --kv-cache-memory-bytes exists and returns the given bytes as available. num_blocks =
  available // page // layers-per-group (kv_cache_utils.get_num_blocks) — the same count as
  0.33's available // bytes_per_block. The logged "GPU KV cache size" is NOT group-aware there:
  num_blocks * block_size (0.10.2 `_get_kv_cache_config_uniform_type`) or num_blocks //
  len(groups) * min block size (0.10.2 `_get_kv_cache_config_uniform_page_size`; 0.11.0
  `get_kv_cache_configs` for every model), and a sliding-window group reserves
  sliding_window - 1 + max_num_batched_tokens tokens (no in-flight factor).
- 0.33.0: requested = ceil(total * utilization), default 0.92; non_kv = total_consumed +
  transient peak headroom; the CUDA-graph estimate is subtracted
  (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); logged N = int(num_blocks /
  blocks_per_request(L) * L), with max_in_flight_tokens in the sliding-window reservation.
- Between them, read in every release wheel from 0.11.2 to 0.32.0 but 0.17 and 0.18, each rule
  changed once (``simulator.vllm_version`` has the table): the ceil from 0.14, the 0.92 default
  and the subtracted CUDA-graph estimate from 0.20 (0.16 has no estimate; 0.19 computes it and
  subtracts it only when the variable is set), the logged N from 0.21, the in-flight tokens in
  the sliding-window reservation from 0.26. ``kv_budget(vllm_version=...)`` (``--vllm-version``)
  follows the release given; the non-KV terms themselves are estimated the same way for all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from frontier.model_spec import pp_partition
from simulator.cuda_graph import CudaGraphConfig
from simulator.lora import LoraConfig, slot_bytes_per_rank
from simulator.vllm_version import (CHUNKED_LOCAL_HYBRID, CUDAGRAPH_ESTIMATE, LOGGED_BY_CONCURRENCY, REQUEST_CEIL,
                                    SEMANTICS, WINDOW_IN_FLIGHT)

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from frontier.model_spec import ModelSpec
    from frontier.parallel import ParallelSpec

GIB = 1 << 30
MIB = 1 << 20
NON_TORCH_TP1_BYTES = int(0.15 * GIB)       # cuBLAS workspace + allocator slack, single GPU
NON_TORCH_MULTI_GPU_BYTES = int(1.0 * GIB)  # + NCCL communicators and custom all-reduce buffers
# What a multi-GPU rank adds to a single GPU's non-torch memory. A profiled non_torch comes from
# one card with collectives stubbed out (profiler/memory_run.py), so a multi-GPU budget adds it.
COMMUNICATOR_BYTES = NON_TORCH_MULTI_GPU_BYTES - NON_TORCH_TP1_BYTES
SAMPLER_FP32_COPIES = 3                     # fp32 logits, probs, and a sorted/sampled copy
CUDA_GRAPH_BYTES_PER_LAYER = 64 * 1024      # graph node/exec state per captured layer per size (~2 MiB / 32 layers)
MIN_GRAPH_BYTES = MIB                       # vLLM floors the per-graph estimate at 1 MiB
HYBRID_GROUP_SIZE_RATIO = 1.5               # kv_cache_planning._get_kv_cache_groups_uniform_page_size
# Gated DeltaNet hybrids (``gdn_layout``), vLLM 0.33 (platforms/interface.py
# _align_hybrid_block_size; v1/attention/backends/flash_attn.py, flashinfer.py, gdn_attn.py)
GDN_ATTENTION_KERNEL_BLOCK = 16             # the smallest kernel block of FA3 (sm_90) and FlashInfer (sm_100)
GDN_CHECKPOINT_ALIGNMENT = 64               # FLASHINFER_GDN_CHECKPOINT_ALIGNMENT ("align" mode)
# The GPUs whose backends those are: FlashAttention 3 on sm_90, FlashInfer (picked first) on the
# sm_100 family, FlashAttention 2 on sm_120 (blocks of multiples of 16 everywhere), and FlashInfer's
# GDN prefill on all (beyond sm_90 from a CUDA 13 build: vLLM 0.33's PyPI wheel is one); sm_80 /
# sm_89 run Triton's GDN prefill (no checkpoint), not modelled.
GDN_SM_VERSIONS = (90, 100, 103, 120)

PROFILED, ESTIMATED, MODEL = "profiled", "estimated", "model"


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group: its attention kind and its layers (0-based indices, whole model)."""

    kind: str                      # "full" | "sliding" | "chunked" | "mamba" (Gated DeltaNet states)
    layers: tuple[int, ...]


@dataclass(frozen=True)
class KVLayout:
    """How vLLM 0.33 lays one rank's KV cache out in blocks (see the module docstring)."""

    block_size: int                # tokens per block
    page_bytes: int                # one layer, one block, one rank
    groups: tuple[KVGroup, ...]
    bytes_per_block: int           # one block of the shared pool on the worst pp stage
    sliding_window: int = 0
    attention_chunk_size: int = 0  # Llama 4's chunked groups
    # Gated DeltaNet layers (``gdn_layout``): one layer's state on one rank before its padding to
    # the page (bytes), and the blocks a request holds in each "mamba" group (MambaSpec
    # max_memory_usage_bytes / page: 2 + a prefill checkpoint in vLLM's "align" mode, 1 in "none")
    mamba_state_bytes: int = 0
    mamba_blocks_per_request: int = 0

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Blocks one request of `max_model_len` tokens takes from the pool, all groups (a local
        group: its spec's ``max_admission_blocks_per_request``)."""
        if max_model_len <= 0:
            raise ValueError(f"max_model_len must be > 0, got {max_model_len}")
        full = -(-max_model_len // self.block_size)
        window = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        sliding = -(-window // self.block_size) + 1
        chunked = -(-min(self.attention_chunk_size + max_in_flight_tokens, max_model_len) // self.block_size)
        per_kind = {"full": full, "sliding": sliding, "chunked": chunked, "mamba": self.mamba_blocks_per_request}
        return sum(per_kind[g.kind] for g in self.groups)

    @property
    def local_window(self) -> int:
        """The sliding window or the attention chunk of the local groups (0: one full group)."""
        return self.sliding_window or self.attention_chunk_size


def _hybrid_groups(full: list[int], local: list[int], kind: str) -> list[KVGroup]:
    """Equal-size groups per kind, layers[i::n] to group i (vLLM's grouping of a hybrid model);
    ``kind``: the local layers' ("sliding" or "chunked")."""
    group_size = min(len(full), len(local))
    if max(len(full), len(local)) < group_size * HYBRID_GROUP_SIZE_RATIO:
        group_size = max(len(full), len(local))
    groups = []
    for kind, layers in (("full", full), (kind, local)):
        n = -(-len(layers) // group_size)
        groups += [KVGroup(kind, tuple(layers[i::n])) for i in range(n)]
    return groups


def kv_layout(model: ModelSpec, parallel: ParallelSpec, block_size: int, hybrid: bool = True,
              prefix_caching: bool = True, num_spec_tokens: int = 0) -> KVLayout:
    """vLLM's KV groups and pool bytes per block for `model` on one rank (worst pp stage).
    ``hybrid=False`` (``--disable-hybrid-kv-cache-manager``, or what vLLM disables it for):
    sliding-window and chunked layers are kept as full attention, one group of every layer
    (vLLM's ``unify_hybrid_kv_cache_specs``). A model with Gated DeltaNet layers: ``gdn_layout``
    (``prefix_caching``: vLLM's mamba cache mode, "align" when on, "none" when off)."""
    if block_size <= 0:
        raise ValueError(f"block_size={block_size} must be > 0")
    if model.num_linear_attention_layers:
        return gdn_layout(model, parallel, block_size, prefix_caching, num_spec_tokens)
    per_token = model.kv_bytes_per_token_per_layer(parallel.tp)
    page = int(per_token * block_size)
    if page != per_token * block_size:
        raise ValueError(f"{model.name}: a {block_size}-token page of {per_token} bytes/token is not whole bytes")
    local_kind = "chunked" if model.attention_chunk_size else "sliding"
    kinds = ["sliding" if hybrid and model.sliding_window and model.is_sliding_layer(i)
             else "chunked" if hybrid and model.is_chunked_layer(i) else "full" for i in range(model.num_layers)]
    full = [i for i, k in enumerate(kinds) if k == "full"]
    local = [i for i, k in enumerate(kinds) if k == local_kind]
    if full and local:
        groups = _hybrid_groups(full, local, local_kind)
    else:
        groups = [KVGroup("full" if full else local_kind, tuple(range(model.num_layers)))]
    return KVLayout(block_size, page, tuple(groups), _worst_stage_layers(model, parallel, groups) * page,
                    model.sliding_window if local and local_kind == "sliding" else 0,
                    model.attention_chunk_size if local and local_kind == "chunked" else 0)


def with_draft_model(layout: KVLayout, model: ModelSpec, draft: ModelSpec, parallel: ParallelSpec) -> KVLayout:
    """``layout`` (``model``'s: one full-attention group, pp 1) with a draft model's layers
    (indices after the target's) in its group: a block grows by one page of every draft layer
    (vLLM 0.33 ``UniformTypeKVCacheSpecs``: ``page_size_bytes`` sums the layers' own pages, so the
    pool holds available // (target pages + draft pages) blocks). ``page_bytes`` stays the target's."""
    if len(layout.groups) != 1 or layout.groups[0].kind != "full" or parallel.pp != 1:
        raise ValueError(f"a draft model beside {model.name}: only one full-attention KV group and pp 1 are "
                         "simulated")
    page = draft.kv_bytes_per_token_per_layer(parallel.tp) * layout.block_size
    if page != int(page):
        raise ValueError(f"{draft.name}: a {layout.block_size}-token page is not whole bytes")
    layers = layout.groups[0].layers + tuple(range(model.num_layers, model.num_layers + draft.num_layers))
    return replace(layout, groups=(KVGroup("full", layers),),
                   bytes_per_block=layout.bytes_per_block + draft.num_layers * int(page))


def _worst_stage_layers(model: ModelSpec, parallel: ParallelSpec, groups: list[KVGroup]) -> int:
    """The most layers one group holds on one pp stage: a block of the shared pool spans them."""
    worst, start = 0, 0
    for n in pp_partition(model.num_layers, parallel.pp):
        stage = range(start, start + n)
        start += n
        worst = max(worst, max(sum(1 for i in g.layers if i in stage) for g in groups))
    return worst


def gdn_state_bytes(model: ModelSpec, tp: int, num_spec_tokens: int = 0) -> int:
    """One Gated DeltaNet layer's state on one TP rank (vLLM 0.33 MambaSpec's unpadded page,
    ``MambaStateShapeCalculator.gated_delta_net_state_shape``): the conv state, (kernel - 1 +
    num_spec_tokens: a drafter's tokens are verified through it) x conv_dim / tp
    (``ModelSpec.linear_conv_dim``), and the temporal state, value heads / tp x value dim x key dim in
    ``mamba_ssm_dtype``, the conv state in ``mamba_conv_dtype`` (``ModelSpec.mamba_state_elem_bytes``;
    Qwen3.5's config: a float32 temporal state, read by vLLM's Qwen3.5 config hook; the engine's
    --mamba-cache-dtype / --mamba-ssm-cache-dtype set both: ``engine_args.with_mamba_dtypes``).
    ValueError when tp does not divide them (vLLM's ``divide``)."""
    conv_dim = model.linear_conv_dim
    if conv_dim % tp or model.linear_num_value_heads % tp:
        raise ValueError(f"{model.name}: tensor parallel size {tp} must divide the Gated DeltaNet conv width "
                         f"{conv_dim} and its {model.linear_num_value_heads} value heads (vLLM splits both)")
    conv_bytes, ssm_bytes = model.mamba_state_elem_bytes
    conv = (model.linear_conv_kernel_dim - 1 + num_spec_tokens) * (conv_dim // tp) * conv_bytes
    temporal = (model.linear_num_value_heads // tp) * model.linear_value_head_dim * model.linear_key_head_dim
    return conv + temporal * ssm_bytes


def gdn_layout(model: ModelSpec, parallel: ParallelSpec, block_size: int, prefix_caching: bool,
               num_spec_tokens: int = 0) -> KVLayout:
    """vLLM 0.33's KV plan of a Gated DeltaNet hybrid on Hopper and Blackwell (``GDN_SM_VERSIONS``:
    the same plan; ``Platform._align_hybrid_block_size``, then the planner's uniform-page
    grouping; module docstring). The attention block grows to the
    smallest multiple A of tokens whose attention page holds one layer's state: A = max(16,
    --block-size) (FlashAttention 3's kernel block multiple), and with prefix caching (vLLM's
    "align" mamba mode, its default) lcm(A, 64) (FlashInfer's GDN prefill emits states every 64
    tokens); the state is padded to that page. The GDN and attention layers form groups of
    equal size (``_hybrid_groups``: Qwen3.5, one full layer in four, gives 3 "mamba" + 1 "full"
    groups) in one pool; a request holds ceil(len / block) attention blocks and, per mamba
    group, 2 state blocks + 1 prefill checkpoint ("align") or 1 ("none"), each + k speculative
    blocks with an MTP drafter of k = ``num_spec_tokens`` drafts (its layer, already in
    ``model``: ``spec_decode.with_draft_layer``, joins the full-attention layers)."""
    per_token = int(model.kv_bytes_per_token_per_layer(parallel.tp))
    state = gdn_state_bytes(model, parallel.tp, num_spec_tokens)
    unit = max(GDN_ATTENTION_KERNEL_BLOCK, block_size)
    if prefix_caching and not model.block_pattern:     # (Mamba2's checkpoints need no grid)
        unit = math.lcm(unit, GDN_CHECKPOINT_ALIGNMENT)
    block = unit * -(-state // (unit * per_token))
    block = max(block_size, GDN_ATTENTION_KERNEL_BLOCK * -(-block // GDN_ATTENTION_KERNEL_BLOCK))
    page = block * per_token
    full = [i for i in range(model.num_layers) if model.has_attention(i)]
    gdn = [i for i in range(model.num_layers) if model.is_linear_attention_layer(i)]   # (a block's MLP: neither)
    groups = _hybrid_groups(full, gdn, "mamba") if full else [KVGroup("mamba", tuple(gdn))]
    return KVLayout(block, page, tuple(groups), _worst_stage_layers(model, parallel, groups) * page,
                    mamba_state_bytes=state,
                    mamba_blocks_per_request=(3 if prefix_caching else 1) + num_spec_tokens)


def _check_gdn_plan(model: ModelSpec, gpu: GpuSpec, vllm_version: tuple[int, int],
                    hybrid_kv_cache_manager: bool) -> None:
    """ValueError (one line) for a Gated DeltaNet model's KV plan that ``gdn_layout`` does not model."""
    why = None
    if gpu.sm_version not in GDN_SM_VERSIONS and not model.block_pattern:     # (Mamba2's Triton kernels: any GPU)
        why = (f"{gpu.name} is sm_{gpu.sm_version}; the plan is modelled on sm_90 GPUs (H100, H200, H20, H800), "
               "the sm_100 family (B200, B300, GB200, GB300) and sm_120 (RTX PRO 6000), where vLLM runs "
               "FlashInfer's GDN prefill (sm_80 / sm_89: Triton's)")
    elif vllm_version != SEMANTICS:
        why = f"--vllm-version {vllm_version[0]}.{vllm_version[1]}: the plan is vLLM {SEMANTICS[0]}.{SEMANTICS[1]}'s"
    elif not hybrid_kv_cache_manager:
        why = "vLLM keeps these layers' states only with its hybrid KV cache manager (--disable-hybrid-kv-cache-manager)"
    if why:
        raise ValueError(f"{model.name}'s {'Mamba2' if model.block_pattern else 'Gated DeltaNet'} KV plan: {why}")


def max_in_flight_tokens(max_num_batched_tokens: int, pp: int, async_scheduling: bool) -> int:
    """VllmConfig.max_in_flight_tokens with model runner V2 (the 0.33 GPU default)."""
    return max_num_batched_tokens * (pp + 1 if async_scheduling else pp)


@dataclass(frozen=True)
class ProfiledOverheads:
    """Non-KV terms fitted from profiled memory rows (calibration/memory_model.py); None = not
    profiled, the estimate is used. Bytes; linear in tokens: intercept + per_token * tokens."""

    activation_intercept_bytes: float | None = None
    activation_bytes_per_token: float | None = None
    non_torch_bytes: int | None = None
    graph_intercept_bytes: float | None = None      # first capture (graph pool) at n captured tokens
    graph_bytes_per_token: float | None = None

    def activation_bytes(self, num_tokens: int) -> int | None:
        if self.activation_bytes_per_token is None:
            return None
        return max(0, round(self.activation_intercept_bytes + self.activation_bytes_per_token * num_tokens))

    def graph_pool_bytes(self, num_tokens: int) -> int | None:
        if self.graph_bytes_per_token is None:
            return None
        return max(0, round(self.graph_intercept_bytes + self.graph_bytes_per_token * num_tokens))


@dataclass(frozen=True)
class MemoryBudget:
    """Per-rank memory at start-up, in bytes; KV capacity in blocks and tokens.

    `sources` names where each non-KV term came from: weights "model" (the shard formula),
    activation / non_torch / cuda_graph "profiled" or "estimated" (marked unused when
    --kv-cache-memory-bytes fixes the KV memory). `layout` and `max_in_flight_tokens` give
    the blocks one request takes, hence the logged token count.
    """

    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_bytes: int
    num_gpu_blocks: int
    block_size: int
    kv_cache_tokens: int
    bytes_per_block: int
    requested_bytes: int = 0
    layout: KVLayout | None = None
    max_in_flight_tokens: int = 0
    sources: tuple[tuple[str, str], ...] = ()
    vllm_version: tuple[int, int] = SEMANTICS     # the release whose logged token count to give

    def max_concurrency(self, max_model_len: int) -> float:
        """vLLM "Maximum concurrency for L tokens per request": blocks / blocks per request."""
        if max_model_len <= 0:
            raise ValueError(f"max_model_len must be > 0, got {max_model_len}")
        if self.layout is None:
            return self.num_gpu_blocks / -(-max_model_len // self.block_size)
        return self.num_gpu_blocks / self.layout.blocks_per_request(max_model_len, self.max_in_flight_tokens)

    def _request_blocks(self, max_model_len: int) -> int:
        return (self.layout.blocks_per_request(max_model_len, self.max_in_flight_tokens) if self.layout
                else -(-max_model_len // self.block_size))

    def max_fitting_model_len(self, upper: int) -> int:
        """The largest max_model_len <= ``upper`` whose one request fits in the blocks besides the
        null block (0 if not even one token does), by vLLM's binary search
        (kv_cache_planning._estimate_max_model_len_from_groups: ``--max-model-len auto``)."""
        usable = self.num_gpu_blocks - 1
        if self._request_blocks(1) > usable:
            return 0
        lo, hi, best = 1, upper, 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._request_blocks(mid) <= usable:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best

    def start_error(self, max_model_len: int) -> str | None:
        """Why vLLM would refuse to start (one request of max_model_len must fit in the blocks
        besides the null block: kv_cache_planning._check_enough_kv_cache_memory), or None."""
        need = self._request_blocks(max_model_len)
        if self.num_gpu_blocks - 1 >= need:
            return None
        return (f"vLLM would not start: one request of max_model_len {max_model_len} needs {need} KV blocks "
                f"({need * self.bytes_per_block / GIB:.2f} GiB) but {self.num_gpu_blocks - 1} are usable "
                f"besides the null block; lower --max-model-len or give the KV cache more memory")

    def check_starts(self, max_model_len: int, role: str = "", more_memory: str = "") -> None:
        """Raise `start_error` as a one-line ValueError ("<role> role: ..." when `role` is given;
        `more_memory` names the flags that give the KV cache more memory)."""
        err = self.start_error(max_model_len)
        if err:
            where = f"{role} role: " if role else ""
            raise ValueError(f"{where}{err}" + (f" ({more_memory})" if more_memory else ""))

    def logged_kv_cache_tokens(self, max_model_len: int) -> int:
        """The N of vLLM's "GPU KV cache size: N tokens": int(max concurrency x max_model_len)
        from vLLM 0.21; before, num_blocks // KV-cache groups x block size (no max_model_len)."""
        if self.vllm_version < LOGGED_BY_CONCURRENCY:
            groups = len(self.layout.groups) if self.layout is not None else 1
            return self.num_gpu_blocks // groups * self.block_size
        return int(self.max_concurrency(max_model_len) * max_model_len)


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_human_int(value: str | int) -> int:
    """vLLM's human_readable_int (vllm/utils/argparse_utils.py): "8g" = 8e9, "25.6k" = 25600,
    "8G" = 8 * 2**30 (no decimals with a binary suffix), plain digits as they are."""
    text = str(value).strip()
    match = _HUMAN_INT.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(f"{value!r}: decimals are not allowed with binary suffix {suffix}; "
                             f"did you mean {number}{suffix.lower()}?")
        return int(number) * _BINARY[suffix]
    if not text.isdigit():
        raise ValueError(f"{value!r} is not a byte count; use digits or a k/m/g/t (1000s) or K/M/G/T (1024s) suffix")
    return int(text)


def activation_peak_bytes(model: ModelSpec, parallel: ParallelSpec, num_tokens: int,
                          num_sample_rows: int) -> int:
    """Transient peak of profile_run over `num_tokens` tokens and a sampler over `num_sample_rows`."""
    ab, h, tp = model.quant.activation_bytes, model.hidden_size, parallel.tp
    heads = model.num_attention_heads // tp
    kv = max(1, model.num_kv_heads // tp)
    if model.is_mla:
        qkv = heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim) * 3
    else:
        qkv = (heads * (2 if model.attn_output_gate else 1) + 2 * kv) * model.head_dim
    widest = qkv
    if model.num_linear_attention_layers:          # Gated DeltaNet in_proj_qkvz + in_proj_ba outputs
        widest = max(widest, -(-(2 * model.linear_key_dim + 2 * model.linear_value_dim
                                 + 2 * model.linear_num_value_heads) // tp))
    if model.intermediate_size and model.num_moe_layers < model.num_layers:
        widest = max(widest, 3 * -(-model.intermediate_size // tp))            # gate_up (2I) + act (I)
    if model.is_moe:
        inter = -(-model.moe_intermediate_size // parallel.moe_tp)
        widest = max(widest, model.num_experts_per_tok * (3 * inter + h))
    forward = num_tokens * (3 * h + widest) * ab
    return int(max(forward, sampler_peak_bytes(model, num_tokens, num_sample_rows)))


def sampler_peak_bytes(model: ModelSpec, num_tokens: int, num_sample_rows: int) -> int:
    """Peak of profile_run's dummy sampler run: the forward's last hidden states of `num_tokens`
    tokens kept alive, and logits plus their fp32 copies for `num_sample_rows` rows."""
    ab = model.quant.activation_bytes
    return int(num_tokens * model.hidden_size * ab
               + num_sample_rows * model.vocab_size * (ab + 4 * SAMPLER_FP32_COPIES))


def cuda_graph_bytes(model: ModelSpec, parallel: ParallelSpec, cudagraph: CudaGraphConfig,
                     first_capture_bytes: int | None = None, lora_cases: int = 1) -> int:
    """Stated model of vLLM 0.33's profile_cudagraph_memory (0 when eager).

    `first_capture_bytes` replaces the estimated first capture (the graph pool at the largest
    capture size) when it was profiled. ``lora_cases``: graphs captured per size (vLLM's
    ``CudagraphDispatcher._get_lora_cases``: 2 with --enable-lora, with and without the LoRA
    kernels; 1 without).
    """
    if cudagraph.enforce_eager or not cudagraph.capture_sizes:
        return 0
    layers = max(1, -(-model.num_layers // parallel.pp))
    first = first_capture_bytes
    if first is None:
        first = activation_peak_bytes(model, parallel, cudagraph.max_capture_size, 0)
    per_graph = max(CUDA_GRAPH_BYTES_PER_LAYER * layers, MIN_GRAPH_BYTES)
    n_piecewise, n_full = len(cudagraph.piecewise_sizes) * lora_cases, len(cudagraph.full_sizes) * lora_cases
    return first + per_graph * (max(n_piecewise - 1, 0) + max(n_full - 1, 0))


def kv_budget(model: ModelSpec, parallel: ParallelSpec, gpu: GpuSpec, *,
              gpu_memory_utilization: float = 0.92, block_size: int = 16,
              max_num_batched_tokens: int, max_num_seqs: int, enforce_eager: bool = False,
              num_gpu_blocks_override: int | None = None, max_model_len: int | None = None,
              num_spec_tokens: int = 0, kv_cache_memory_bytes: int | None = None,
              async_scheduling: bool = True, profiled: ProfiledOverheads | None = None,
              cudagraph_capture_sizes: tuple[int, ...] | None = None,
              max_cudagraph_capture_size: int | None = None, cudagraph_mode: str | None = None,
              vllm_version: tuple[int, int] = SEMANTICS, interactivity: bool = False,
              hybrid_kv_cache_manager: bool = True, prefix_caching: bool = True,
              draft: ModelSpec | None = None, lora: LoraConfig | None = None) -> MemoryBudget:
    """KV budget of one rank (all ranks use the minimum; ours are symmetric), as vLLM
    ``vllm_version`` (major, minor) computes it (``simulator.vllm_version``: before 0.14 the
    requested memory is not rounded up, before 0.20 no CUDA-graph estimate is subtracted,
    before 0.26 a sliding-window group reserves max_num_batched_tokens, not the tokens in
    flight, and before 0.21 the logged token count is num_blocks // groups x block size).
    ``interactivity``: --performance-mode interactivity's capture grid (``simulator.cuda_graph``).
    ``hybrid_kv_cache_manager=False``: --disable-hybrid-kv-cache-manager (``kv_layout``); vLLM
    also turns it off for chunked local attention (Llama 4) with an EAGLE drafter
    (``num_spec_tokens``) and, by default, before 0.14 (``CHUNKED_LOCAL_HYBRID``).
    ``prefix_caching``: sets a Gated DeltaNet model's layout (``gdn_layout``), planned as vLLM
    0.33 plans it on sm_90 and sm_100-family GPUs only (ValueError otherwise, and with the hybrid
    manager disabled), an MTP drafter's ``num_spec_tokens`` speculative state blocks included; the
    block size of the budget is then the aligned one. ``draft``: a draft model
    (--speculative-config method draft_model, as served) loaded beside ``model`` at the same TP
    size: its weights count, and its layers' KV joins the one full-attention group (vLLM's
    ``UniformTypeKVCacheSpecs``: a block holds one page of every layer of both models, each layer's
    page its own size; ``with_draft_model``). ``lora``: --enable-lora's adapter slots count as
    weights (``simulator.lora.slot_bytes_per_rank``) and every CUDA graph is captured twice.

    `kv_cache_tokens` = num_gpu_blocks * block_size, or vLLM's logged figure when
    `max_model_len` is given. `kv_cache_memory_bytes` (vLLM --kv-cache-memory-bytes) is the KV
    memory per GPU as given, ignoring gpu_memory_utilization. Raises ValueError when the model
    does not fit (`MemoryBudget.start_error` says whether vLLM would refuse max_model_len).
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]")
    if block_size <= 0 or max_num_batched_tokens <= 0 or max_num_seqs <= 0:
        raise ValueError(f"block_size={block_size}, max_num_batched_tokens={max_num_batched_tokens}, "
                         f"max_num_seqs={max_num_seqs} must all be > 0")
    if num_gpu_blocks_override is not None and num_gpu_blocks_override <= 0:
        raise ValueError(f"num_gpu_blocks_override={num_gpu_blocks_override} must be > 0")
    if kv_cache_memory_bytes is not None and kv_cache_memory_bytes <= 0:
        raise ValueError(f"kv_cache_memory_bytes={kv_cache_memory_bytes} must be > 0 bytes")
    if model.num_linear_attention_layers:
        _check_gdn_plan(model, gpu, vllm_version, hybrid_kv_cache_manager)
    profiled = profiled or ProfiledOverheads()
    requested = gpu.memory_bytes * gpu_memory_utilization
    if vllm_version >= REQUEST_CEIL:
        requested = math.ceil(requested)
    weights = model.weight_bytes_per_rank(parallel)
    if draft is not None:
        weights += draft.weight_bytes_per_rank(parallel)
    if lora is not None:
        weights += slot_bytes_per_rank(model, parallel, lora)
    gib = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
    if weights >= requested and kv_cache_memory_bytes is None:
        raise ValueError(
            f"{model.name} does not fit: weights {gib(weights)} per GPU >= requested {gib(requested)} "
            f"({gpu.name} {gib(gpu.memory_bytes)} x gpu_memory_utilization {gpu_memory_utilization}) "
            f"at tp={parallel.tp} pp={parallel.pp}; raise tp/pp or gpu_memory_utilization")
    multi_gpu = parallel.tp * parallel.dp * parallel.pp > 1
    non_torch, non_torch_src = profiled.non_torch_bytes, PROFILED
    if non_torch is None:
        non_torch_src = ESTIMATED
        non_torch = NON_TORCH_MULTI_GPU_BYTES if multi_gpu else NON_TORCH_TP1_BYTES
    elif multi_gpu:  # profiled on one card: no communicators there
        non_torch += COMMUNICATOR_BYTES
        non_torch_src = f"{PROFILED} + {ESTIMATED} communicators"
    sample_rows = min(max_num_seqs, max_num_batched_tokens)
    activation, activation_src = profiled.activation_bytes(max_num_batched_tokens), PROFILED
    if activation is None:
        activation_src = ESTIMATED
        activation = activation_peak_bytes(model, parallel, max_num_batched_tokens, sample_rows)
    else:  # the profiler's memory run has no sampler run: its peak may be the larger one
        sampler = sampler_peak_bytes(model, max_num_batched_tokens, sample_rows)
        if sampler > activation:
            activation, activation_src = sampler, f"{ESTIMATED} sampler run (above the profiled forward)"
    if vllm_version < CUDAGRAPH_ESTIMATE:
        graphs, graph_src = 0, "not subtracted before vLLM 0.20"
    else:
        cudagraph = CudaGraphConfig.from_vllm(max_num_seqs, max_num_batched_tokens, enforce_eager, gpu.sm_version,
                                              num_spec_tokens, cudagraph_capture_sizes, max_cudagraph_capture_size,
                                              cudagraph_mode, vllm_version, interactivity)
        first = profiled.graph_pool_bytes(cudagraph.max_capture_size) if cudagraph.capture_sizes else None
        graphs = cuda_graph_bytes(model, parallel, cudagraph, first, lora_cases=2 if lora is not None else 1)
        graph_src = PROFILED if first is not None else ESTIMATED
    hybrid = hybrid_kv_cache_manager and not (model.attention_chunk_size and (
        num_spec_tokens or vllm_version < CHUNKED_LOCAL_HYBRID))
    layout = kv_layout(model, parallel, block_size, hybrid, prefix_caching, num_spec_tokens)
    if draft is not None:
        layout = with_draft_model(layout, model, draft, parallel)
    block_size, bytes_per_block = layout.block_size, layout.bytes_per_block
    if kv_cache_memory_bytes is not None:
        available = kv_cache_memory_bytes
    else:
        available = requested - weights - non_torch - activation - graphs
    if num_gpu_blocks_override is not None:
        blocks = num_gpu_blocks_override
    else:
        if available < bytes_per_block:
            if kv_cache_memory_bytes is not None:
                raise ValueError(f"--kv-cache-memory-bytes {kv_cache_memory_bytes} is less than one KV block "
                                 f"({bytes_per_block} bytes) of {model.name}; give at least that")
            raise ValueError(
                f"no memory left for KV cache on {gpu.name}: requested {gib(requested)} - weights {gib(weights)} "
                f"- activations {gib(activation)} - non-torch {gib(non_torch)} - cuda graphs {gib(graphs)} "
                f"= {gib(available)}; raise tp/pp or gpu_memory_utilization, or lower max_num_batched_tokens")
        blocks = int(available // bytes_per_block)
    kv_bytes = int(available) if num_gpu_blocks_override is None else blocks * bytes_per_block
    in_flight = (max_in_flight_tokens(max_num_batched_tokens, parallel.pp, async_scheduling)
                 if vllm_version >= WINDOW_IN_FLIGHT else max_num_batched_tokens)
    sources = (("weights", MODEL), ("activation", activation_src), ("non_torch", non_torch_src),
               ("cuda_graph", graph_src))
    if kv_cache_memory_bytes is not None:
        sources = tuple((term, src if term == "weights" else f"{src}, unused: kv_cache_memory_bytes given")
                        for term, src in sources)
    budget = MemoryBudget(weights, activation, non_torch, graphs, kv_bytes, blocks, block_size,
                          blocks * block_size, bytes_per_block, math.ceil(requested), layout, in_flight, sources,
                          vllm_version)
    if max_model_len is not None:   # vLLM: int(blocks / blocks_per_request(L) * L)
        budget = replace(budget, kv_cache_tokens=budget.logged_kv_cache_tokens(max_model_len))
    return budget
