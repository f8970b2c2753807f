"""SGLang 0.5.23 server arguments and what it derives from them at start-up.

``SglangArgs`` holds the flags of ``python -m sglang.launch_server`` the simulator takes (None: the
server's default); ``resolve_sglang`` derives, as 0.5.23 does:

* by GPU memory (``arg_groups/memory_hook.py::handle_gpu_memory_settings``, nvidia-smi MiB):
  ``chunked_prefill_size`` 2048 (< 20 GiB), 4096 (< 60 GiB), 8192 (< 160 GiB), else 16384; the
  decode graphs' ``max_bs`` 8 (< 20 GiB), 48 / 160 (< 35 GiB, TP < 4 / >= 4), 32 / 160 (< 60 GiB),
  256 / 512 (< 160 GiB), else 512, cut to ``--max-running-requests`` when that is given and
  smaller; the prefill graphs' token ceiling = ``chunked_prefill_size`` (at most 8192 for MLA,
  at most ``--max-total-tokens``);
* ``mem_fraction_static`` (when not given) = round((M - reserved) / M, 3), M the GPU's MiB, with
  reserved = 512 + 1.5 x max(chunked_prefill_size, 2048) + TP x PP / 8 x 1024 + the graphs'
  reserve (2 x decode max_bs, + 8 per prefill graph, 1536 for MLA models) MiB, at least 10240 MiB
  on GPUs above 60 GiB;
* the token pool (``mem_cache/kv_cache_configurator.py::_profile_available_bytes``): the memory
  free after the weights load minus (1 - mem_fraction_static) x the memory free before it (and
  for a multimodal model the ``SGLANG_VLM_CACHE_SIZE_MB`` embedding cache, 100 MiB:
  ``mm_runtime_reservation_gb`` with the default CPU feature transport), divided by the KV bytes
  of one token on one rank (every layer's K and V); ``--max-total-tokens`` caps it;
* ``max_running_requests`` (``resolve_max_num_reqs``): min(clamp(int(tokens / context_len x 512),
  2048, 4096), tokens // 2), or min(the flag, tokens // 2).

The memory free before the weights load is not in any source: it is the GPU's memory minus the
CUDA context and the communicators, estimated here (``PRE_LOAD_USED_*``; not measured). The
weights are ``ModelSpec.weight_bytes_per_rank``. Simulated: one engine per TP group (``--dp-size``
groups are separate engines; no PP, no attention DP), whose MoE layers run SGLang's expert
parallelism with ``--ep-size`` (``sglang_parallel``), models without sliding-window layers. The page
size is ``--page-size`` or the default attention backend's (``get_default_attn_backend``,
``_mla_backend_page_constraints``): 64 for models without MLA on the sm_100 family (B200, GB200,
B300: trtllm_mha), else 1 (FA3 on Hopper, FlashInfer / Triton elsewhere, MLA on the sm_100 family:
FlashInfer); the token pool is cut to whole pages.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from frontier.gpu import is_sm100_family
from simulator.sglang_graphs import SglangGraphs, decode_capture_sizes, prefill_capture_sizes
from simulator.sglang_scheduler import SglangConfig

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from frontier.model_spec import ModelSpec
    from frontier.parallel import ParallelSpec

MIB = 1 << 20
GIB = 1 << 30
SGLANG_VERSION = "0.5.23"
PRE_LOAD_USED_TP1 = int(0.5 * GIB)      # CUDA context + allocator state before the weights (estimate)
PRE_LOAD_USED_MULTI = int(1.0 * GIB)    # + NCCL communicators with TP > 1 (estimate)
MLA_PREFILL_GRAPH_MAX = 8192
TRTLLM_MHA_PAGE_SIZE = 64               # _mla_backend_page_constraints: trtllm_mha's page size
MLA_GRAPH_RESERVE_MIB = 1.5 * 1024
PREFILL_GRAPH_RESERVE_MIB = 8           # non-torch memory per prefill graph
DECODE_GRAPH_RESERVE_MIB = 2            # per decode batch size of max_bs
VLM_CACHE_MIB = 100                     # SGLANG_VLM_CACHE_SIZE_MB: a multimodal model's embedding cache


@dataclass(frozen=True)
class SglangArgs:
    """``sglang.launch_server`` flags (None: SGLang's default, resolved by ``resolve_sglang``)."""

    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    mem_fraction_static: float | None = None
    context_length: int | None = None
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    enable_mixed_chunk: bool = False
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = None    # --cuda-graph-bs: the decode batch sizes captured
    page_size: int | None = None
    ep_size: int | None = None          # --ep-size (--expert-parallel-size, --ep): None = 1
    disable_ignore_eos: bool = False    # sglang.bench_serving's flag: requests sent without ignore_eos

    def __post_init__(self) -> None:
        for name in ("max_prefill_tokens", "max_running_requests", "max_total_tokens", "context_length",
                     "cuda_graph_max_bs", "ep_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"--{name.replace('_', '-')} {value!r}; must be a positive integer")
        c = self.chunked_prefill_size
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or (c < 1 and c != -1)):
            raise ValueError(f"--chunked-prefill-size {c!r}; must be a positive integer or -1 (no chunking)")
        m = self.mem_fraction_static
        if m is not None and not 0.0 < m < 1.0:
            raise ValueError(f"--mem-fraction-static {m!r}; must be in (0, 1)")
        bs = self.cuda_graph_bs
        if bs is not None and (not bs or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in bs)):
            raise ValueError(f"--cuda-graph-bs {bs!r}; must be positive integers")
        p = self.page_size
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 1):
            raise ValueError(f"--page-size {p!r}; must be a positive integer")
        # --schedule-policy and --schedule-conservativeness: checked by SglangConfig (resolve_sglang)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class SglangLayout:
    """What one SGLang engine (a TP group) runs with: its scheduler config, graphs and memory."""

    config: SglangConfig
    graphs: SglangGraphs
    mem_fraction_static: float
    weight_bytes: int
    kv_bytes_per_token: int
    pre_load_free_bytes: int


def _by_memory(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode max_bs) defaults by GPU memory (MiB) and TP."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def sglang_parallel(args: SglangArgs, model: ModelSpec, tp: int) -> ParallelSpec:
    """One SGLang TP group's layout: attention over ``tp`` ranks, an MoE model's experts over
    ep = ``--ep-size`` ranks of expert parallelism, each expert split over moe_tp = tp / ep
    (``moe_ep_setup.py``: moe_tp_size = tp_size // ep_size; the default all-to-all backend "none":
    every rank keeps every token, the MoE output all-reduced as with TP). --ep-size is moot for a
    dense model (ep 1). ValueError (one line) where SGLang would not start (the model's heads,
    experts or block-scaled widths do not split so)."""
    from frontier.parallel import ParallelSpec
    ep = args.ep_size or 1
    if ep > 1 and model.is_moe:
        if tp % ep:
            raise ValueError(f"--ep-size {ep} must divide the tensor parallel size {tp} (SGLang: tp_size must be "
                             "divisible by ep_size)")
        if model.num_experts % ep:
            raise ValueError(f"--ep-size {ep} must divide {model.name}'s {model.num_experts} experts")
    parallel = ParallelSpec(tp=tp, ep=ep if model.is_moe else 1)
    block = parallel.block_split_error(model, "sglang")
    if block is not None:
        raise ValueError(block)
    parallel.check_model(model)
    return parallel


def resolve_sglang(args: SglangArgs, model: ModelSpec, parallel: ParallelSpec, gpu: GpuSpec) -> SglangLayout:
    """SGLang's start-up derivations for one engine of ``parallel.tp`` GPUs (see the module docstring).
    ValueError (one line) for layouts it does not simulate or a model that does not fit."""
    if parallel.pp != 1 or parallel.dp != 1:
        raise ValueError(f"--engine sglang simulates one tensor-parallel group here (pp {parallel.pp}, dp {parallel.dp} "
                         "given); DP groups are separate engines (--data-parallel-size)")
    if model.sliding_window:
        raise ValueError(f"--engine sglang does not simulate {model.name}'s sliding-window layers (SGLang keeps them "
                         "in a separate SWA pool); use --engine vllm")
    if model.attention_chunk_size:
        raise ValueError(f"--engine sglang does not simulate {model.name}'s chunked local-attention layers "
                         "(Llama 4); use --engine vllm")
    if model.num_linear_attention_layers:
        raise ValueError(f"--engine sglang does not simulate {model.name}'s Gated DeltaNet layers (SGLang keeps "
                         "their states in a separate Mamba pool); `frontier memory --engine vllm` plans vLLM's KV cache")
    page = args.page_size
    if page is None:        # the default attention backend's: trtllm_mha (sm_100 family, not MLA) runs 64
        page = TRTLLM_MHA_PAGE_SIZE if is_sm100_family(gpu.sm_version) and not model.is_mla else 1
    gpu_mib = gpu.memory_bytes / MIB
    chunk_default, max_bs = _by_memory(gpu_mib, parallel.tp)
    chunk = chunk_default if args.chunked_prefill_size is None else args.chunked_prefill_size
    if args.cuda_graph_bs is not None:          # given sizes: the largest is max_bs
        max_bs = max(args.cuda_graph_bs)
    elif args.cuda_graph_max_bs is not None:
        max_bs = args.cuda_graph_max_bs
    elif args.max_running_requests is not None and max_bs > args.max_running_requests:
        max_bs = args.max_running_requests
    extend_tokens = chunk if chunk > 0 else args.max_prefill_tokens   # one extend batch's most tokens
    prefill_max = extend_tokens
    if model.is_mla:
        prefill_max = min(MLA_PREFILL_GRAPH_MAX, prefill_max)
    if args.max_total_tokens is not None:
        prefill_max = min(prefill_max, args.max_total_tokens)
    decode_sizes = (tuple(sorted(set(args.cuda_graph_bs))) if args.cuda_graph_bs is not None
                    else decode_capture_sizes(max_bs))
    prefill_sizes = prefill_capture_sizes(prefill_max)
    if args.mem_fraction_static is not None:
        mfs = args.mem_fraction_static
    else:
        activation = max(extend_tokens, 2048)
        reserved = 512 + activation * 1.5 + parallel.tp * parallel.pp / 8 * 1024
        if not args.disable_cuda_graph:
            reserved += DECODE_GRAPH_RESERVE_MIB * max_bs
            reserved += MLA_GRAPH_RESERVE_MIB if model.is_mla else PREFILL_GRAPH_RESERVE_MIB * len(prefill_sizes)
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        mfs = round((gpu_mib - reserved) / gpu_mib, 3)
    pre_load = gpu.memory_bytes - (PRE_LOAD_USED_MULTI if parallel.tp > 1 else PRE_LOAD_USED_TP1)
    weights = model.weight_bytes_per_rank(parallel)
    mm_reserve = VLM_CACHE_MIB * MIB if model.has_vision_encoder else 0    # not with --language-model-only
    kv_bytes = pre_load - weights - pre_load * (1 - mfs) - mm_reserve
    per_token = model.kv_bytes_per_token_per_rank(parallel)
    tokens = int(kv_bytes // per_token) if kv_bytes > 0 else 0
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    tokens = tokens // page * page         # the configurator aligns the pool to whole pages
    if tokens < 2:
        where = f"{model.name} on {gpu.name} x TP{parallel.tp} (weights {weights / GIB:.2f} GiB per GPU)"
        if weights >= pre_load:
            raise ValueError(f"{where} does not fit the {pre_load / GIB:.2f} GiB free at start; raise the TP size")
        need = 1 - (pre_load - weights) / pre_load      # SGLang's own hint: 1 - available / pre-load free
        raise ValueError(f"{where} leaves no KV cache under --mem-fraction-static {mfs}; raise it above "
                         f"{need:.3f} or the TP size")
    context = args.context_length or model.max_position_embeddings
    if args.max_running_requests is None:
        running = min(max(min(int(tokens / context * 512), 4096), 2048), tokens // 2)
    else:
        running = min(args.max_running_requests, tokens // 2)
    graphs = SglangGraphs(() if args.disable_cuda_graph else decode_sizes,
                          () if args.disable_cuda_graph else prefill_sizes)
    config = SglangConfig(max_total_tokens=tokens, context_length=context, chunked_prefill_size=chunk,
                          max_prefill_tokens=args.max_prefill_tokens, max_running_requests=running,
                          schedule_policy=args.schedule_policy,
                          schedule_conservativeness=args.schedule_conservativeness,
                          enable_mixed_chunk=args.enable_mixed_chunk, disable_radix_cache=args.disable_radix_cache,
                          disable_overlap_schedule=args.disable_overlap_schedule, ignore_eos=not args.disable_ignore_eos,
                          page_size=page)
    return SglangLayout(config, graphs, mfs, weights, per_token, pre_load)
