"""Drive the REAL SGLang 0.5.23 scheduler on a CPU and record what it schedules.

Importable only where ``sglang==0.5.23`` is installed (``scripts/install_oracle.sh``).
Public API: ``SglRequest``, ``SglStep``, ``run_sglang_scheduler`` (and ``OUTPUT_TOKEN_ID``).

What runs is SGLang's own code
------------------------------
* The event loops themselves: ``Scheduler.event_loop_normal`` (``disable_overlap_schedule=True``)
  and ``Scheduler.event_loop_overlap`` (``False``), unmodified, and through them
  ``get_next_batch_to_run`` -> ``get_new_batch_prefill`` / ``_get_new_batch_prefill_raw``
  (``PrefillAdder``, ``SchedulePolicy.calc_priority``, mixed chunk via
  ``ScheduleBatch.mix_with_running``), ``update_running_batch`` (``_reqs_finishing_inflight``,
  ``ScheduleBatch.check_decode_mem``, ``retract_decode`` / ``release_req``,
  ``NewTokenRatioTracker.decay_step`` and the ratio after a retraction), ``run_batch``
  (``FutureMap`` relay, CPU streams/events), ``process_batch_result`` ->
  ``SchedulerBatchResultProcessor.process_batch_result_prefill`` / ``_decode`` (finish by
  length, ``checkpoint_kv_cache`` after every prefill, ``release_kv_cache`` on finish), and
  ``on_idle`` (its pool-leak invariant checks and the ratio reset).
* Requests enter through the real ``Scheduler.handle_generate_request`` (``Req`` creation,
  ``init_req_max_new_tokens`` clipping, ``validate_input_length``, ``_add_request_to_queue``).
* Memory: ``ReqToTokenPool``, an ``MHATokenToKVPool`` (1 layer, 1 KV head, head_dim 1,
  bf16, on CPU), ``TokenToKVPoolAllocator`` (page_size 1) or ``PagedTokenToKVPoolAllocator``
  (the classes SGLang's configurator picks for a plain model), and the tree cache built by
  SGLang's own factory ``mem_cache.registry.create_tree_cache``: in 0.5.23 that is
  ``UnifiedRadixCache`` (Rust ``TreeCore`` from the wheel), also with
  ``--disable-radix-cache`` (same class, ``disable=True``; 0.5.23 has no ``ChunkCache`` on
  this path).
* ``ModelConfig`` of a tiny Llama config.json (no weights; its EOS is token 2), the
  metrics collector context and ``SchedulerMetricsReporter`` (metrics off),
  ``SchedulerOutputStreamer`` (its outputs go to a null socket), KV-event and load
  publishers (nothing configured), ``GrammarManager``, ``SchedulerDPAttnAdapter``
  (no DP: batches pass through), ``SchedulerLoadInquirer``, ``SchedulerPoolStatsObserver``,
  ``SchedulerInvariantChecker``, ``BeamCoordinator``, ``SessionController``.

What is replaced, and why
-------------------------
* ``Scheduler.__init__`` (it loads a model on a GPU, starts NCCL and ZMQ): the scheduler is
  ``object.__new__(Scheduler)`` with the attributes ``__init__`` sets, in its order, mostly
  by calling the real ``init_*`` methods (``_build_scheduler``). Pool sizes follow
  ``TpModelWorker.get_worker_info``: ``max_req_len = min(context_length - 1,
  max_total_tokens - 1)``, ``max_req_input_len = max_req_len - 5``; ``max_running_requests``
  goes through the real ``KVCacheConfigurator.resolve_max_num_reqs`` (so it is
  ``min(max_running_requests, max_total_tokens // 2)``) and sets the ``ReqToTokenPool``
  rows and ``pp_max_micro_batch_size`` as on a GPU.
* The model: ``_FakeModelWorker.forward_batch_generation`` returns, for every row of every
  batch, the sampled token ``OUTPUT_TOKEN_ID`` (0). (All requests thus produce the same
  output ids, so finished requests with equal prompts share their outputs in the tree.)
* ``Scheduler.ingest_requests`` (the ZMQ intake) is the driver's hook: it adds the requests
  whose ``arrival_step`` is this loop iteration, in list order, via
  ``handle_generate_request``, and ends the loop once every request has finished (and no
  result is queued). ``get_next_batch_to_run`` is wrapped only to observe (it calls the
  real one).
* No-op stand-ins where the real piece needs a process group, a socket or a thread: the
  profiler manager, the memory-saver adapter, the weight updater (its ``offload_tags`` are
  empty), the IPC channels (a null detokenizer socket), the watchdog (not started); the
  request receiver/dispatcher and internal-state controller are not built (no intake).
  Process groups are single-rank namespaces (world size 1, no backend); the model runner
  is a namespace holding the pools, a CPU stream and no attention backend.
* Modules imported at module level on the scheduler's import path that need a GPU stack:
  ``triton`` and ``torchvision`` are served as stub modules by a meta-path finder, only
  to imports made from ``sglang.*`` modules (torch and transformers keep seeing them as
  absent; torch's "has triton" caches are settled before the finder is installed, and the
  stubs are dropped from ``sys.modules`` after import). Attributes of a stub are inert
  decorators/callables with no attributes, so probes such as
  ``triton.runtime.driver.active`` fail as on a machine without Triton. Stubs are only
  touched at module import (``@triton.jit`` and the like; the first run lazily imports
  the model registry, and the stubs are dropped again after each run); the scheduling code
  never calls one.

Requests
--------
``SamplingParams(max_new_tokens=n, ignore_eos=ignore_eos)`` (default False) and no stop strings/ids; the
tiny model's EOS set is ``{2}`` and the fake sampler only emits 0, so the only finish is by
length, exactly at ``max_new_tokens`` -- unless SGLang itself clips ``max_new_tokens`` at
admission (``Scheduler.init_req_max_new_tokens``: to ``max_req_len - input_len - 1`` and to
``max_total_tokens - ceil_page(input_len) - page_size - 1``), which the driver keeps.
``ignore_eos`` is False by default: SGLang reserves running requests' remaining tokens
times ``new_token_ratio`` only for requests *without* ``ignore_eos`` (with it, the ratio is
1.0, and with the radix cache disabled admission takes ``PrefillAdder.add_one_req_ignore_eos``
instead); ``ignore_eos=True`` sends every request as SGLang's ``bench_serving`` does. A request SGLang rejects (e.g. ``input_len >= max_req_input_len``) raises
RuntimeError. Token ids are arbitrary non-negative ints; shared prefixes share ids.

Knobs -> ServerArgs: ``max_total_tokens``, ``chunked_prefill_size`` (``-1`` = no chunking),
``max_prefill_tokens``, ``max_running_requests``, ``page_size``, ``schedule_policy``,
``enable_mixed_chunk``, ``disable_radix_cache``, ``disable_overlap_schedule``,
``schedule_conservativeness``, ``context_length`` are the ServerArgs fields of the same
names; everything else is the 0.5.23 default for ``device="cpu"``, ``skip_tokenizer_init``.
Scheduling environment variables (``SGLANG_INIT_NEW_TOKEN_RATIO`` & co, see
``_SCHEDULING_ENV``) must be unset: the driver refuses to run otherwise.

Pool size: ``max_total_tokens`` is the allocator size. SGLang's allocators keep one extra
padding slot (page_size 1: slot 0) or padding page (page 0) outside that size (free slots
1..size), so ``available_tokens`` at start equals ``max_total_tokens``; it must be a
multiple of ``page_size``. ``ReqToTokenPool`` likewise has a padding row 0 besides its
``max_running_requests`` rows.

Steps and observation points
----------------------------
Loop iteration ``i`` (0, 1, ...) first ingests the requests with ``arrival_step == i``, then
runs the real loop body. One ``SglStep`` is recorded per iteration that formed a batch, or
began with an unfinished request in the system, or processed a finish; iterations with
nothing in the system (waiting for a later arrival) are not recorded, so list indices equal
iteration numbers only while the system stays busy.

* ``kind``/``extend``/``decode``/``retracted``/``new_token_ratio``: the batch formed by
  ``get_next_batch_to_run`` in this iteration, read right after it returns (``extend``:
  ``(rid, extend_lens[i], prefix_lens[i])`` of the batch's extend rows in batch order;
  ``decode``: a decode batch's rids, or a mixed batch's ``decoding_reqs``; ``retracted``:
  requests whose retraction count rose during this scheduling, in waiting-queue order, i.e.
  retraction order; ``new_token_ratio``: ``new_token_ratio_tracker.current``; a reset by
  ``on_idle`` later in an idle iteration shows in the next step).
* ``finished``/``available_tokens``/``evictable_tokens``: read at the end of the iteration
  (when the next ``ingest_requests`` runs); ``finished`` = requests whose finish was
  processed during this iteration (sorted).
  - Normal mode: after this batch's ``process_batch_result`` (or ``on_idle``).
  - Overlap mode: the loop forms and launches batch N, then processes batch N-1's result.
    So the step of iteration N reports batch N (its KV already allocated) together with the
    finishes, frees and tree inserts of batch N-1's result. The last step is typically
    ``idle`` and carries the final finishes. Batch N is formed before N-1's result is
    processed: it sees N-1's requests merged into the running batch (their outputs not yet
    appended), and ``_reqs_finishing_inflight`` drops requests whose in-flight token reaches
    ``max_new_tokens`` from the next decode/mixed batch.
"""

from __future__ import annotations

import json
import os
import tempfile
import types
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from import_stubs import StubFinder

# ---------------------------------------------------------------------------------
# GPU-only modules imported at module level on the scheduler's import path.
# ---------------------------------------------------------------------------------

_STUBS = StubFinder(("triton", "torchvision"), ("sglang.",), "__sglang_oracle_stub__", {"triton": "3.5.0"})


def _install_stubs() -> None:
    import torch
    import torch._dynamo  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.runtime.triton_compat  # noqa: F401
    import torch.utils._triton as torch_triton
    import torch.utils.flop_counter  # noqa: F401

    # torch caches "is triton installed"; settle it before any stub exists.
    torch_triton.has_triton_package()
    torch_triton.has_triton()
    del torch
    _STUBS.install()


_install_stubs()

import torch  # noqa: E402

from sglang.srt.managers.io_struct import TokenizedGenerateReqInput  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.runtime_context import (  # noqa: E402
    SpawnRanks,
    get_schedule,
    publish,
    reset_context,
)
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402


_STUBS.drop()

OUTPUT_TOKEN_ID = 0

# Environment variables read by the scheduling path; a set one changes the oracle.
_SCHEDULING_ENV = (
    "SGLANG_INIT_NEW_TOKEN_RATIO",
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
    "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
    "SGLANG_RETRACT_DECODE_STEPS",
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION",
    "SGLANG_MAX_NEW_TOKENS_LIMIT",
    "SGLANG_EXACT_CHUNK_FILL",
    "SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP",
    "SGLANG_ENABLE_DELAY_SAMPLE",
    "SGLANG_ENABLE_WAITING_PREFIX_REFRESH",
    "SGLANG_RADIX_FORCE_MISS",
    "SGLANG_TEST_RETRACT",
    "SGLANG_TEST_RETRACT_INTERVAL",
    "SGLANG_TEST_RETRACT_NO_PREFILL_BS",
    "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND",
    "IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD",
    "IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD",
)


@dataclass(frozen=True)
class SglRequest:
    rid: str
    input_ids: tuple[int, ...]        # token ids (shared prefixes share ids)
    max_new_tokens: int
    arrival_step: int = 0             # added to the scheduler's waiting queue before this loop iteration's scheduling


@dataclass(frozen=True)
class SglStep:
    kind: str                         # "prefill" (extend batch), "decode", "mixed" (extend + running decodes, --enable-mixed-chunk), or "idle" (nothing ran)
    extend: tuple[tuple[str, int, int], ...]   # (rid, extend_input_len, prefix_len) of each request extended this step, in batch order (empty for decode)
    decode: tuple[str, ...]           # rids decoding one token this step (decode batch, or the decodes mixed into the extend batch), batch order
    retracted: tuple[str, ...]        # rids retracted while forming this step, in retraction order
    finished: tuple[str, ...]         # rids whose finish was processed after this step (sorted)
    new_token_ratio: float            # scheduler.new_token_ratio after the step's scheduling
    available_tokens: int             # token_to_kv_pool_allocator.available_size() after the step's result is processed
    evictable_tokens: int             # tree_cache.evictable_size() after the step's result is processed


# ---------------------------------------------------------------------------------
# The model: a tiny Llama config.json (ModelConfig reads it; no weights anywhere).
# ---------------------------------------------------------------------------------

_TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


class _NoOp:
    """Stand-in for an observability/IPC component: the given attributes, ``enable_*``
    flags read False, and every other attribute is a method that does nothing."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name.startswith("enable"):
            return False
        return lambda *args, **kwargs: None


class _FakeModelWorker:
    """The only replaced computation: the model forward and the sampler. Every row of
    a batch "samples" ``OUTPUT_TOKEN_ID`` (a chunk's sample is dropped by the real result
    processing, as on a GPU)."""

    def __init__(self, model_runner: Any, model_config: Any) -> None:
        self.model_runner = model_runner
        self.model_config = model_config
        self.last_shared_read_runner = model_runner

    def forward_batch_generation(self, batch: ScheduleBatch, **kwargs: Any):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult

        bs = batch.batch_size()
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=None),
            next_token_ids=torch.full((bs,), OUTPUT_TOKEN_ID, dtype=torch.int64),
            can_run_cuda_graph=False,
        )

    def __getattr__(self, name: str) -> Any:   # hicache/LoRA hooks the worker owns: none here
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _NullSocket:
    """The detokenizer end of the output pipe: outputs are built for real and dropped."""

    def __getattr__(self, name: str) -> Any:   # send_output, send_pyobj, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def _server_args(model_dir: Path, **knobs: Any) -> ServerArgs:
    return ServerArgs(
        model_path=str(model_dir),
        device="cpu",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        load_format="dummy",
        **knobs,
    )


def _build_scheduler(server_args: ServerArgs, max_total_tokens: int) -> Scheduler:
    """A ``Scheduler`` built without its ``__init__`` (which loads a model on a GPU and
    opens ZMQ sockets): the attributes ``__init__`` sets, from the published config, by
    running the real ``init_*`` methods where they need no GPU/IPC."""
    from sglang.srt.managers import scheduler as scheduler_module
    from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
    from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
        NgramEmbeddingManager,
    )
    from sglang.srt.runtime_context import (
        get_context,
        get_disagg,
        get_exec,
        get_lora,
        get_memory,
        get_parallel,
        get_serving,
        get_spec,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.utils.common import require_mlp_sync

    s: Scheduler = object.__new__(Scheduler)
    # ---- Scheduler.__init__, "Parse args" -------------------------------------------
    s.is_initializing = True
    s.forward_ct = 0
    s.processed_tokens_counter = 0
    s.cur_batch_for_debug = None
    s.server_args = server_args
    s.nccl_port = None
    sched = get_schedule()
    s.schedule_policy = sched.schedule_policy
    s.enable_priority_scheduling = sched.enable_priority_scheduling
    s.abort_on_priority_when_disabled = sched.abort_on_priority_when_disabled
    s.schedule_low_priority_values_first = sched.schedule_low_priority_values_first
    s.priority_scheduling_preemption_threshold = sched.priority_scheduling_preemption_threshold
    s.enable_lora = get_lora().enable_lora
    s.enable_lora_overlap_loading = get_lora().enable_lora_overlap_loading
    s.max_loras_per_batch = get_lora().max_loras_per_batch
    s.enable_overlap = not sched.disable_overlap_schedule
    s.enable_overlap_mlx = False
    s.enable_pdmux = get_disagg().enable_pdmux
    s.skip_tokenizer_init = get_serving().skip_tokenizer_init
    s.stream_interval = get_serving().stream_interval
    s.spec_algorithm = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
    s.page_size = sched.page_size
    memory = get_memory()
    s.enable_hierarchical_cache = memory.enable_hierarchical_cache
    s.enable_lmcache = memory.enable_lmcache
    s.enable_session_radix_cache = memory.enable_session_radix_cache
    s.enable_hicache_storage = memory.hicache_storage_backend is not None
    s.enable_unified_cache_external_linker = memory.enable_unified_cache_external_linker
    s.enable_decode_hicache = (
        get_disagg().disaggregation_decode_enable_radix_cache and s.enable_hierarchical_cache
    )
    s.max_recv_per_poll = scheduler_module.envs.SGLANG_SCHEDULER_MAX_RECV_PER_POLL.get()
    s.max_new_tokens_limit = scheduler_module.envs.SGLANG_MAX_NEW_TOKENS_LIMIT.get()
    s.enable_hisparse = memory.enable_hisparse
    s.attn_dp_enabled = get_parallel().attn_dp_enabled
    s.enable_unified_memory = memory.enable_unified_memory

    s.init_model_config()  # ModelConfig of the tiny config.json
    s.init_metrics_collector()  # metrics are off: no collector
    # init_ipc_channels / init_idle_sleeper: no sockets; outputs go nowhere.
    s.ipc_channels = _NoOp(
        send_to_detokenizer=_NullSocket(),
        recv_from_tokenizer=None,
        recv_from_rpc=None,
        send_metrics_from_scheduler=None,
    )
    s.load_snapshot_writer = None
    s.recv_from_tokenizer = None
    s.idle_sleeper = None
    # init_tokenizer with skip_tokenizer_init
    s.is_generation = s.model_config.is_generation
    s.tokenizer = s.processor = None
    s._mm_processor = None
    s.require_mlp_sync = require_mlp_sync()  # init_moe_gemm_config's result
    s.init_mamba_backend()

    # ---- init_model_worker: pools sized like get_worker_info, no model ------------
    context_len = s.model_config.context_len
    # KVCacheConfigurator.resolve_max_num_reqs: min(requested, tokens // 2).
    max_running_requests = KVCacheConfigurator.resolve_max_num_reqs(
        types.SimpleNamespace(model_config=s.model_config, attn_dp_size=1, mambaish_config=None),
        max_total_tokens,
    )
    if s.model_config.hf_eos_token_id and OUTPUT_TOKEN_ID in s.model_config.hf_eos_token_id:
        raise RuntimeError("the tiny model's EOS would stop requests early")
    device = "cpu"
    req_to_token_pool = ReqToTokenPool(
        size=max_running_requests,
        max_context_len=context_len + get_req_to_token_extra_context_len(),
        device=device,
        enable_memory_saver=False,
    )
    kv_pool = MHATokenToKVPool(
        max_total_tokens,
        page_size=s.page_size,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=1,
        layer_num=1,
        device=device,
        enable_memory_saver=False,
        enable_alt_stream=False,
    )
    if s.page_size == 1:
        allocator = TokenToKVPoolAllocator(
            max_total_tokens, dtype=torch.bfloat16, device=device, kvcache=kv_pool, need_sort=False
        )
    else:
        allocator = PagedTokenToKVPoolAllocator(
            max_total_tokens,
            page_size=s.page_size,
            dtype=torch.bfloat16,
            device=device,
            kvcache=kv_pool,
            need_sort=False,
        )
    model_runner = types.SimpleNamespace(
        model_config=s.model_config,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool=kv_pool,
        token_to_kv_pool_allocator=allocator,
        attn_backend=None,
        forward_stream=torch.cpu.Stream(),
        canary_manager=None,
        prefill_aware_swa=False,
        lora_manager=None,
        is_hybrid_swa=False,
        mtp_draft_device_pools=(),
        mtp_draft_mamba_pools=(),
        shared_read_done_event=None,
    )
    model_runner.ngram_embedding_manager = NgramEmbeddingManager.from_model(
        model=torch.nn.Module(),
        model_config=s.model_config,
        req_to_token_pool=req_to_token_pool,
        max_running_requests=max_running_requests,
        device=device,
    )
    s.tp_worker = _FakeModelWorker(model_runner, s.model_config)
    s.draft_worker = None
    s.external_corpus_manager = None
    s.model_worker = s.tp_worker
    s.schedule_stream = torch.cpu.Stream()
    # TpModelWorker.get_worker_info
    s.max_total_num_tokens = max_total_tokens
    s.max_prefill_tokens = sched.max_prefill_tokens
    s.max_running_requests = max_running_requests
    s.max_queued_requests = sched.max_queued_requests
    s.max_req_len = min(context_len - 1, max_total_tokens - 1)
    s.max_req_input_len = s.max_req_len - 5
    s.random_seed = server_args.random_seed
    s.device = device
    s.forward_stream = model_runner.forward_stream
    s.min_free_slots_delayer = None
    min_free_slots = scheduler_module.resolve_min_free_slots(
        sched.min_free_slots_delay, s.max_running_requests, is_dflash_family=False
    )
    if min_free_slots is not None:
        s.min_free_slots_delayer = scheduler_module.MinFreeSlotsDelayer(min_free_slots=min_free_slots)
    if not get_parallel().pp_max_micro_batch_size:
        get_context().override(
            "scheduler.pp_max_micro_batch_size_default",
            pp_max_micro_batch_size=max(s.max_running_requests // get_parallel().pp_size, 1),
        )
    # One rank: every process group is a single-member group with no backend.
    single = types.SimpleNamespace(
        world_size=1, rank=0, rank_in_group=0, first_rank=0, last_rank=0,
        is_first_rank=True, is_last_rank=True, cpu_group=None, device_group=None,
    )
    s.tp_group = s.attn_tp_group = s.attn_cp_group = s.pp_group = s.world_group = single
    s.dp_tp_group = single
    s.tp_cpu_group = s.attn_tp_cpu_group = s.attn_cp_cpu_group = s.dp_tp_cpu_group = None
    s.pad_input_ids_func = None

    # ---- kv_cache_builder.build_kv_cache: the tree cache the real factory picks ----
    s.kv_event_lora_names = None
    params = CacheInitParams(
        disable=memory.disable_radix_cache,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=s.page_size,
        is_eagle=False,
        eviction_policy=memory.radix_eviction_policy,
        eviction_policy_config=memory.radix_eviction_policy_config,
        enable_session_radix_cache=memory.enable_session_radix_cache,
        enable_mamba_extra_buffer=get_exec().mamba.enable_mamba_extra_buffer,
        enable_mamba_extra_buffer_lazy=get_exec().mamba.enable_mamba_extra_buffer_lazy,
        decoder_swa_bounded_replay=get_exec().features.enable_decoder_swa_bounded_replay,
        chunked_prefill_size=sched.chunked_prefill_size,
    )
    tree_cache = create_tree_cache(
        TreeCacheBuildContext(
            server_args=server_args,
            params=params,
            is_hybrid_swa=False,
            is_hybrid_ssm=False,
            enable_hierarchical_cache=False,
            disable_radix_cache=memory.disable_radix_cache,
            tp_worker=s.tp_worker,
            model_config=s.model_config,
            tp_size=1,
            tp_rank=0,
            tp_group=None,
        )
    )
    s.is_hybrid_swa = False
    s.is_hybrid_ssm = False
    s.sliding_window_size = None
    s.full_tokens_per_layer = None
    s.swa_tokens_per_layer = None
    s.req_to_token_pool = req_to_token_pool
    s.token_to_kv_pool_allocator = allocator
    s.kv_shard_widening = 1
    s.disable_radix_cache = memory.disable_radix_cache
    s.tree_cache = tree_cache
    s.hisparse_coordinator = None
    s.init_hisparse_coordinator()
    s.decode_offload_manager = None

    # ---- the rest of __init__, in its order ------------------------------------------
    s.init_running_status()
    s.init_chunked_prefill()
    s.maybe_init_dynamic_chunk_sizer()
    s.init_diffusion_llm()
    s.init_metrics_reporter()
    s.scheduler_stage_metrics = s.metrics_reporter.scheduler_stage_metrics
    s.init_kv_events_publisher()  # no kv_events_config: publishes nothing
    s.init_schedule_policy()
    # init_watch_dog_memory_saver_input_blocker without the watchdog thread
    s.watchdog = None
    s.memory_saver_adapter = _NoOp()
    s.recv_skipper = None
    s.input_blocker = None
    s.profiler_manager = _NoOp()
    s.maybe_init_rust_server()
    s.init_disaggregation()
    s.init_overlap()
    s.ngram_embedding_manager = model_runner.ngram_embedding_manager
    s.use_ngram_embedding = s.model_config.use_ngram_embedding
    s.init_deterministic_inference_config()
    s.init_dsa_kpool_truncation_align()
    s.init_mamba_truncation_align()
    s.check_truncation_align_fits_chunk()
    s.weight_updater = _NoOp(offload_tags=set())
    s.init_lora_drainer()
    s.init_lora_overlap_loader()
    s.init_grammar_manager()
    s.maybe_init_scripted_scheduler_hook()
    s.request_receiver = None  # ingest_requests is replaced by the driver
    s.init_dp_attn_adapter()
    s.init_pool_stats_observer()
    s.init_invariant_checker()
    s.init_load_publisher()
    s.init_load_inquirer()
    s.init_output_streamer()
    s.init_batch_result_processor()
    s.internal_state = None
    s.is_initializing = False
    # run_event_loop on a CPU: no WAR barrier, no-op schedule_stream.synchronize.
    s._war_barrier_enabled = False
    s.enable_fpm = False
    return s


# ---------------------------------------------------------------------------------
# The loop: the real event_loop_normal / event_loop_overlap, fed by the driver.
# ---------------------------------------------------------------------------------


class _StepRecorder:
    """Replaces ``Scheduler.ingest_requests`` (the ZMQ intake) and wraps
    ``get_next_batch_to_run`` to observe each loop iteration."""

    def __init__(self, scheduler: Scheduler, requests: Sequence[SglRequest], max_steps: int,
                 ignore_eos: bool = False) -> None:
        self.s = scheduler
        self.max_steps = max_steps
        self.ignore_eos = ignore_eos
        self.arrivals: dict[int, list[SglRequest]] = {}
        for request in requests:
            self.arrivals.setdefault(request.arrival_step, []).append(request)
        self.total = len(requests)
        self.reqs: dict[str, Any] = {}          # rid -> sglang Req
        self.finished_seen: set[str] = set()
        self.steps: list[SglStep] = []
        self.iteration = -1
        self.pending: dict[str, Any] | None = None   # the iteration being observed
        self._real_get_next_batch_to_run = scheduler.get_next_batch_to_run

    # -- Scheduler.ingest_requests --------------------------------------------------
    def ingest_requests(self, stop_at_pause: bool = False) -> list:
        s = self.s
        if self.iteration >= 0:
            self._close_iteration()
        if len(self.finished_seen) == self.total and not s.result_queue:
            # Leave the real loop: paused -> ``continue`` -> ``gracefully_exit`` -> break.
            s.gracefully_exit = True
            s._engine_paused = True
            return []
        self.iteration += 1
        if self.iteration >= self.max_steps:
            raise RuntimeError(f"SGLang scheduler still busy after {self.max_steps} loop iterations")
        for request in self.arrivals.get(self.iteration, ()):
            self._add(request)
        busy = any(rid not in self.finished_seen for rid in self.reqs)
        self.pending = {"busy": busy, "batch": None}
        return []

    def _add(self, request: SglRequest) -> None:
        s = self.s
        sampling_params = SamplingParams(max_new_tokens=request.max_new_tokens, ignore_eos=self.ignore_eos)
        sampling_params.normalize(None)
        sampling_params.verify(s.model_config.vocab_size)
        s.handle_generate_request(
            TokenizedGenerateReqInput(
                rid=request.rid,
                input_text=None,
                input_ids=array("q", request.input_ids),
                input_embeds=None,
                mm_inputs=None,
                token_type_ids=None,
                sampling_params=sampling_params,
                return_logprob=False,
                logprob_start_len=-1,
                top_logprobs_num=0,
                token_ids_logprob=None,
                stream=False,
            )
        )
        matches = [r for r in s.waiting_queue if r.rid == request.rid]
        if len(matches) != 1:
            raise RuntimeError(f"request {request.rid!r} did not reach the waiting queue")
        req = matches[0]
        if req.finished() or req.to_finish is not None:
            raise RuntimeError(f"SGLang rejected request {request.rid!r}: {req.to_finish or req.finished_reason}")
        self.reqs[request.rid] = req

    # -- Scheduler.get_next_batch_to_run --------------------------------------------
    def get_next_batch_to_run(self, running_batch: ScheduleBatch, last_batch: Any):
        s = self.s
        retractions = {rid: req.retraction_count for rid, req in self.reqs.items()}
        plan = self._real_get_next_batch_to_run(running_batch=running_batch, last_batch=last_batch)
        batch = plan.batch_to_run
        retracted = [
            req.rid for req in s.waiting_queue
            if req.rid in retractions and req.retraction_count > retractions[req.rid]
        ]
        extend: list[tuple[str, int, int]] = []
        decode: list[str] = []
        if batch is None:
            kind = "idle"
        elif batch.forward_mode.is_decode():
            kind = "decode"
            decode = [req.rid for req in batch.reqs]
        elif batch.forward_mode.is_mixed():
            kind = "mixed"
            n_decoding = len(batch.decoding_reqs or ())
            n_extend = batch.batch_size() - n_decoding
            extend = [
                (req.rid, batch.extend_lens[i], batch.prefix_lens[i])
                for i, req in enumerate(batch.reqs[:n_extend])
            ]
            decode = [req.rid for req in batch.reqs[n_extend:]]
        elif batch.forward_mode.is_extend():
            kind = "prefill"
            extend = [
                (req.rid, batch.extend_lens[i], batch.prefix_lens[i])
                for i, req in enumerate(batch.reqs)
            ]
        else:
            raise RuntimeError(f"unexpected forward mode {batch.forward_mode!r}")
        self.pending.update(
            batch=batch,
            kind=kind,
            extend=tuple(extend),
            decode=tuple(decode),
            retracted=tuple(retracted),
            new_token_ratio=float(s.new_token_ratio_tracker.current),
        )
        return plan

    def _close_iteration(self) -> None:
        s = self.s
        pending, self.pending = self.pending, None
        now_finished = {rid for rid, req in self.reqs.items() if req.finished()}
        finished = sorted(now_finished - self.finished_seen)
        self.finished_seen |= now_finished
        if pending is None or "kind" not in pending:
            return
        if pending["batch"] is None and not pending["busy"] and not finished:
            return   # nothing in the system: an empty loop iteration, not recorded
        self.steps.append(
            SglStep(
                kind=pending["kind"],
                extend=pending["extend"],
                decode=pending["decode"],
                retracted=pending["retracted"],
                finished=tuple(finished),
                new_token_ratio=pending["new_token_ratio"],
                available_tokens=int(s.token_to_kv_pool_allocator.available_size()),
                evictable_tokens=int(s.tree_cache.evictable_size()),
            )
        )


def run_sglang_scheduler(
    requests: Sequence[SglRequest],
    *,
    max_total_tokens: int,
    chunked_prefill_size: int = 8192,
    max_prefill_tokens: int = 16384,
    max_running_requests: int = 4096,
    page_size: int = 1,
    schedule_policy: str = "fcfs",
    enable_mixed_chunk: bool = False,
    disable_radix_cache: bool = False,
    disable_overlap_schedule: bool = True,
    schedule_conservativeness: float = 1.0,
    context_length: int = 32768,
    max_steps: int = 10_000,
    ignore_eos: bool = False,
) -> list[SglStep]:
    """Run SGLang 0.5.23's scheduler over ``requests``; one ``SglStep`` per loop
    iteration that ran a batch or had requests (see the module docstring).

    The knobs are the ServerArgs fields of the same names. ``max_steps`` bounds the loop
    iterations (recorded or not): RuntimeError beyond it (e.g. a request that can never be
    admitted). RuntimeError too for a request SGLang rejects at arrival, ValueError for a
    malformed one."""
    set_env = [name for name in _SCHEDULING_ENV if name in os.environ]
    if set_env:
        raise RuntimeError(f"unset these environment variables to run the SGLang oracle: {set_env}")
    if page_size < 1 or max_total_tokens < 1 or max_total_tokens % page_size:
        raise ValueError(f"max_total_tokens ({max_total_tokens}) must be a positive multiple of page_size ({page_size})")
    rids = [r.rid for r in requests]
    if len(set(rids)) != len(rids):
        raise ValueError("request ids must be unique")
    for r in requests:
        if not r.input_ids:
            raise ValueError(f"request {r.rid!r}: empty input_ids")
        if r.max_new_tokens < 1:
            raise ValueError(f"request {r.rid!r}: max_new_tokens must be >= 1")
        if r.arrival_step < 0:
            raise ValueError(f"request {r.rid!r}: negative arrival_step")
    knobs = dict(
        max_total_tokens=max_total_tokens,
        chunked_prefill_size=chunked_prefill_size,
        max_prefill_tokens=max_prefill_tokens,
        max_running_requests=max_running_requests,
        page_size=page_size,
        schedule_policy=schedule_policy,
        enable_mixed_chunk=enable_mixed_chunk,
        disable_radix_cache=disable_radix_cache,
        disable_overlap_schedule=disable_overlap_schedule,
        schedule_conservativeness=schedule_conservativeness,
        context_length=context_length,
    )
    with tempfile.TemporaryDirectory(prefix="frontier-sglang-oracle-") as tmp:
        model_dir = Path(tmp)
        (model_dir / "config.json").write_text(json.dumps(_TINY_LLAMA_CONFIG))
        server_args = _server_args(model_dir, **knobs)
        reset_context()
        try:
            publish(server_args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
            scheduler = _build_scheduler(server_args, max_total_tokens)
            recorder = _StepRecorder(scheduler, requests, max_steps, ignore_eos)
            scheduler.ingest_requests = recorder.ingest_requests
            scheduler.get_next_batch_to_run = recorder.get_next_batch_to_run
            if scheduler.enable_overlap:
                scheduler.event_loop_overlap()
            else:
                scheduler.event_loop_normal()
        finally:
            reset_context()
            _STUBS.drop()   # the first run imports the model registry
    return recorder.steps
