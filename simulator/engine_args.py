"""vLLM engine arguments (the flags of ``vllm serve``) and how vLLM 0.33 fills their defaults.

``EngineArgs`` holds what the user said (``None`` = "use vLLM's default");
``EngineArgs.resolve(model, gpu)`` returns a ``ResolvedEngine`` with every value
set, following ``vllm/engine/arg_utils.py`` (``get_batch_defaults`` and
``_set_default_max_num_seqs_and_batched_tokens_args``) for the OpenAI API
server usage context, which is what ``vllm serve`` runs:

    device memory >= 160 GiB (B200, B300)        -> max_num_batched_tokens 16384, max_num_seqs 1024
                                                    (from vLLM 0.28; before, the next tier's 8192)
    >= 70 GiB and not A100 (H100, H200, H800...) -> 8192, 1024
    otherwise (A100, L40S, L4, H20 is 96 GB -> 70 GiB tier) -> 2048, 256
    --no-enable-chunked-prefill                   -> that = max(max_model_len, that) (from vLLM 0.12;
                                                    max_model_len before)
    max_num_batched_tokens = min(max_num_seqs * max_model_len, that)   (only when defaulted; from
                                                    vLLM 0.12, not before)
    max_num_seqs = min(max_num_seqs, max_num_batched_tokens)            (only when defaulted)
    --performance-mode throughput (vLLM 0.17+)    -> both tiers' values doubled (before the two
                                                    min() above); interactivity captures CUDA
                                                    graphs at every size 1..32 (simulator.cuda_graph)
    --all2all-backend deepep_low_latency or nixl_ep with expert parallelism and DP > 1
    (``batched_dp_moe``, from vLLM 0.20)          -> "that" is 256 tokens (the kernels' per-rank
                                                    buffers hold max_num_batched_tokens tokens)

``max_model_len`` defaults to the model's ``max_position_embeddings``; -1 (``--max-model-len auto``,
vLLM 0.14+) starts from it and then shrinks to the longest request the KV cache holds
(``simulation.fit_max_model_len``).
``block_size`` defaults to 16, or 64 for MLA models (FlashMLA supports only 64).
``kv_cache_dtype`` "auto" keeps the checkpoint's KV-cache scheme, as 0.33 resolves it
(``resolve_kv_cache_dtype_string``: a modelopt ``kv_cache_quant_algo`` FP8 -> fp8; the attention
layer also turns a compressed-tensors ``kv_cache_scheme`` into fp8), else the model dtype (2
bytes); an explicit value wins over the checkpoint (``--kv-cache-dtype bfloat16`` on a
modelopt FP8-KV checkpoint stores bf16). Before 0.14 (``--vllm-version``) "auto" is the model
dtype whatever the checkpoint says: ``resolve_kv_cache_dtype_string`` (``vllm/utils/
torch_utils.py``, called by ``EngineArgs.create_engine_config``) comes in with 0.14.0; the 0.13.0
``create_engine_config`` passes ``cache_dtype=self.kv_cache_dtype`` unresolved, and in the
0.10.2-0.12.0 wheels the attention layer takes ``cache_config.cache_dtype`` as given (a modelopt
``kv_cache_quant_algo`` only loads the scales), so an FP8 KV cache needed ``--kv-cache-dtype fp8``.
``quantization`` "fp8" on an unquantized checkpoint is vLLM's online quantization (``Fp8Config``
with dynamic activation scales: every linear and fused-MoE weight stored as per-tensor FP8 at
load time; embeddings, lm_head, norms and routers stay bf16; the KV cache keeps its dtype). On a
checkpoint that is already quantized the simulator refuses it: vLLM accepts only the
checkpoint's own method there, which the checkpoint already implies.
Per-architecture overrides (vLLM's ``MODELS_CONFIG_MAP`` hooks, run before the CUDA-graph sizes
are set): gpt-oss (``GptOssForCausalLM``) sets ``max_cudagraph_capture_size`` 1024 when neither
capture flag is given (``ARCH_MAX_CUDAGRAPH_CAPTURE``; 0.10.2 and 0.11.2 did the same, 0.11.0 used
992), so its capture grid runs to 1024 tokens as a user-given maximum does (no uniform-decode
extras). The catalogue's other architectures with hooks (DeepSeek-V3.2/V4, GLM-5 DSA, Gemma 4,
Kimi-K3, Nemotron-H, Qwen3.5, MiniMax-M3) are model types the simulator refuses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from frontier.gpu import GpuSpec
from frontier.model_spec import ModelSpec
from frontier.quant import kv_bytes_for_dtype, parse_quantization
from frontier.parallel import ParallelSpec
from frontier.vision import with_pixel_bounds
from simulator.cuda_graph import CUDAGRAPH_MODES, CudaGraphConfig
from simulator.lora import LoraConfig, lora_error
from simulator.spec_decode import SpecDecodeConfig, draft_model_error
from simulator.kv_cache.hybrid import HybridKVCacheManager
from simulator.kv_cache.manager import KVCacheManager
from simulator.kv_cache.state import StateKVCacheManager
from simulator.kv_cache.state_align import AlignStateKVCacheManager
from simulator.memory import KVLayout, max_in_flight_tokens
from simulator.scheduler_config import SchedulerConfig
from simulator.vllm_version import (ASYNC_BY_DEFAULT, BATCHED_DP_MOE, BUDGET_FROM_SEQS_X_LEN,
                                    CHUNKED_LOCAL_NO_FULL_GRAPHS, DEFAULT as VLLM_DEFAULT, HT_WITHOUT_GRAPHS,
                                    KV_AUTO_FROM_CHECKPOINT, LARGE_GPU_DEFAULTS, MAX_MODEL_LEN_AUTO,
                                    PERFORMANCE_MODE, QUEUED_LIMITS, RESERVE_FULL_ISL_FLAG, SCHEDULER_024,
                                    SCHEDULER_031, default_gpu_memory_utilization, parse_vllm_version)

GiB = 1 << 30

SCHEDULING_POLICIES = ("fcfs", "priority")
# vLLM 0.33 --kv-cache-dtype values the simulator prices (vllm/config/cache.py CacheDType); the
# others (fp8_inc, fp8_ds_mla, nvfp4_ds_mla, turboquant_*) have layouts it does not model.
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# --quantization values simulated: online FP8 of an unquantized checkpoint (vLLM's Fp8Config)
ONLINE_QUANTIZATION = {"fp8": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
# vLLM's per-architecture max_cudagraph_capture_size when neither capture flag is given
# (vllm/model_executor/models/config.py, GptOssForCausalLMConfig.verify_and_update_config)
ARCH_MAX_CUDAGRAPH_CAPTURE = {"GptOssForCausalLM": 1024}
# SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP and the backends of
# ParallelConfig.use_batched_dp_moe (vllm/config/parallel.py, 0.20.0-0.33.0)
BATCHED_DP_MOE_TOKENS = 256
BATCHED_DP_MOE_BACKENDS = ("deepep_low_latency", "nixl_ep")
ROUTERS = ("round_robin", "least_loaded")
AUTO_MAX_MODEL_LEN = -1   # --max-model-len auto / -1: the longest that fits in the KV cache (vLLM 0.14+)
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")
# --all2all-backend: vLLM 0.33's ParallelConfig.all2all_backend (the CLI's choices), how MoE tokens
# reach their experts with DP > 1. The batch engine prices each name as one of two shapes (the values):
# vLLM's default, an all_gather + reduce_scatter of every token over the TP x DP group, and a
# dispatch + combine of the routed tokens over the EP group (DeepEP, MoRI, MoonEP, NIXL-EP and
# FlashInfer's NVLink all2all kernels), two all_to_all collectives of the busiest rank's routed
# tokens. "naive" and "pplx" were removed from vLLM: it warns and runs allgather_reducescatter.
ALL2ALL_PRICED_AS = {
    "allgather_reducescatter": "allgather_reducescatter", "naive": "allgather_reducescatter",
    "pplx": "allgather_reducescatter",
    **{name: "all_to_all" for name in ("deepep_high_throughput", "deepep_low_latency", "deepep_v2",
                                       "mori_high_throughput", "mori_low_latency", "moonep", "nixl_ep",
                                       "flashinfer_all2allv", "flashinfer_nvlink_two_sided",
                                       "flashinfer_nvlink_one_sided")},
}
# vllm/config/vllm.py OPTIMIZATION_LEVEL_TO_CONFIG: the cudagraph_mode each -O level sets when the user
# gave none (O0: no compilation, no graphs; O1: piecewise; O2 = default and O3: full and piecewise).
OPTIMIZATION_LEVEL_CUDAGRAPH_MODE = {0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}


def _positive(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class EngineArgs:
    """The vLLM flags a simulated deployment accepts; ``None`` means vLLM's default."""

    model: str = "meta-llama/Llama-3.1-8B"
    gpu: str = "H100"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    enable_eplb: bool = False            # --enable-eplb: experts placed by load (simulator.eplb)
    num_redundant_experts: int = 0       # --eplb-config '{"num_redundant_experts": N}'
    num_replicas: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None   # None: the release's default (0.92; 0.9 before vLLM 0.20)
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None  # KV bytes per GPU; skips profiling, ignores gpu_memory_utilization
    kv_cache_dtype: str = "auto"    # --kv-cache-dtype: auto = the checkpoint's KV scheme, else the model dtype
    # --mamba-cache-dtype / --mamba-ssm-cache-dtype: a Gated DeltaNet layer's conv state and temporal
    # state dtypes (auto: the model dtype; the temporal state: the conv state's, or Qwen3.5's config
    # mamba_ssm_dtype, float32); no effect on other models, as in vLLM
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    quantization: str | None = None   # --quantization: fp8 = online FP8 of an unquantized checkpoint
    enable_prefix_caching: bool = True
    # --disable-hybrid-kv-cache-manager: sliding-window layers kept as full attention in ONE KV group
    # (vLLM's unify_hybrid_kv_cache_specs: every layer in a block, no out-of-window frees)
    disable_hybrid_kv_cache_manager: bool = False
    # --language-model-only: a multimodal checkpoint served without its vision tower (vLLM skips
    # building it: no weights, no multimodal profiling)
    language_model_only: bool = False
    # --limit-mm-per-prompt: input items a prompt may carry per modality, as (modality, count) pairs
    # (vLLM's JSON '{"image": 0, "video": 0}' or a scenario file's mapping); a vision tower whose
    # every modality is limited to 0 is not built, as with --language-model-only (vLLM's
    # ``_mark_tower_model``); other counts change nothing simulated (text-only requests)
    limit_mm_per_prompt: tuple[tuple[str, int], ...] = ()
    # --mm-encoder-tp-mode: "weights" splits the vision tower's linear weights by TP (vLLM's
    # default), "data" keeps the whole tower on every rank
    mm_encoder_tp_mode: str = "weights"
    # --mm-processor-kwargs (JSON): the image processor's settings; Qwen's min_pixels / max_pixels
    # are simulated (frontier.vision.with_pixel_bounds), as (key, value) pairs
    mm_processor_kwargs: tuple[tuple[str, Any], ...] = ()
    # --disable-chunked-mm-input: a prefill chunk never covers part of an image it starts before
    # (vLLM refuses it when the tower's largest item exceeds --max-num-batched-tokens)
    disable_chunked_mm_input: bool = False
    enable_chunked_prefill: bool = True   # --enable-chunked-prefill / --no-enable-chunked-prefill
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False   # vLLM 0.31+
    max_num_active_seqs: int | None = None   # --max-num-active-seqs (vLLM 0.31+): RUNNING cap below max_num_seqs
    watermark: float = 0.0               # --watermark (vLLM 0.24+): KV blocks kept free when admitting
    prefill_schedule_interval: int = 1   # --prefill-schedule-interval (vLLM 0.24+): prefill every N steps
    max_num_queued_reqs: int | None = None      # --max-num-queued-reqs (vLLM 0.29+): API-server 503 limit
    max_num_queued_tokens: int | None = None    # --max-num-queued-tokens (vLLM 0.29+): prompt tokens in prefill
    scheduler_reserve_full_isl: bool | None = None   # --[no-]scheduler-reserve-full-isl (0.19+); None: the release's
    enforce_eager: bool = False
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # tokens; None = vLLM's default list
    max_cudagraph_capture_size: int | None = None           # tokens; None = vLLM's default
    cudagraph_mode: str | None = None   # --compilation-config cudagraph_mode; None = the -O level's mode
    optimization_level: int = 2          # -O0..-O3; only its default cudagraph_mode is simulated
    async_scheduling: bool | None = None   # None: the release's default (on from vLLM 0.14, off before)
    scheduling_policy: str = "fcfs"
    router: str = "round_robin"
    all2all_backend: str = "allgather_reducescatter"   # --all2all-backend (ALL2ALL_PRICED_AS)
    performance_mode: str = "balanced"   # --performance-mode (vLLM 0.17+): balanced, interactivity, throughput
    # --speculative-config (with Frontier's --spec-acceptance-rate): EAGLE-family drafts, None = off
    speculative_config: SpecDecodeConfig | None = None
    # --stream-interval: tokens the API server buffers before it streams them (first and last sent at once)
    stream_interval: int = 1
    # --enable-lora and its flags (simulator/lora.py): adapters' GPU slots, --max-loras per batch
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None
    # not a vLLM flag: the release whose model kernels, KV budget, engine defaults (async scheduling
    # among them) and DP load balancer to reproduce (simulator/vllm_version.py); the scheduler
    # stays vLLM 0.33's
    vllm_version: str = VLLM_DEFAULT

    def __post_init__(self) -> None:
        # a scenario file's values reach here untyped (a YAML list or number for a name ended in a
        # TypeError / AttributeError traceback; a word for a switch passed as true)
        for name, what in (("model", "a catalogue name or a config.json path"), ("gpu", "a GPU name")):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"--{name} must be {what}, got {getattr(self, name)!r}")
        for name in ("enable_expert_parallel", "enable_eplb", "enable_prefix_caching", "enable_chunked_prefill",
                     "disable_hybrid_kv_cache_manager", "language_model_only", "disable_chunked_mm_input",
                     "long_prefill_token_threshold_adaptive", "scheduler_reserve_full_isl", "enforce_eager",
                     "async_scheduling", "enable_lora"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (value is None and name in ("async_scheduling",
                                                                                "scheduler_reserve_full_isl")):
                raise ValueError(f"--{name.replace('_', '-')} must be true or false, got {value!r}")
        object.__setattr__(self, "limit_mm_per_prompt", mm_limits(self.limit_mm_per_prompt))
        object.__setattr__(self, "mm_processor_kwargs", mm_processor_kwargs(self.mm_processor_kwargs))
        if self.mm_encoder_tp_mode not in MM_ENCODER_TP_MODES:
            raise ValueError(f"--mm-encoder-tp-mode {self.mm_encoder_tp_mode!r} is not one of "
                             f"{', '.join(MM_ENCODER_TP_MODES)}")
        if self.max_model_len == AUTO_MAX_MODEL_LEN:
            if self.vllm_release < MAX_MODEL_LEN_AUTO:
                raise ValueError(f"--max-model-len auto (-1) came with vLLM 0.14; --vllm-version {self.vllm_version} "
                                 "needs a length")
        else:
            _positive("max_model_len", self.max_model_len)
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                     "num_replicas", "max_num_seqs", "max_num_batched_tokens", "max_num_active_seqs",
                     "max_num_queued_reqs", "max_num_queued_tokens", "prefill_schedule_interval", "stream_interval",
                     "block_size", "num_gpu_blocks_override", "kv_cache_memory_bytes",
                     "max_cudagraph_capture_size"):
            _positive(name, getattr(self, name))
        sizes = self.cudagraph_capture_sizes
        if sizes is not None:
            if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
                raise ValueError(f"--cudagraph-capture-sizes must be a list of positive integers, got {sizes!r}")
            object.__setattr__(self, "cudagraph_capture_sizes", tuple(sizes))
            for v in self.cudagraph_capture_sizes:
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ValueError(f"--cudagraph-capture-sizes must be positive integers, got {v!r} in "
                                     f"{list(self.cudagraph_capture_sizes)}")
            if not self.cudagraph_capture_sizes:
                raise ValueError("--cudagraph-capture-sizes should contain at least one element; "
                                 "give positive integers, e.g. 1 2 4 8")
        if self.cudagraph_mode is not None:
            if not isinstance(self.cudagraph_mode, str) or self.cudagraph_mode.upper() not in CUDAGRAPH_MODES:
                raise ValueError(f"cudagraph_mode {self.cudagraph_mode!r} is not one of {', '.join(CUDAGRAPH_MODES)}")
            object.__setattr__(self, "cudagraph_mode", self.cudagraph_mode.upper())
        if (isinstance(self.optimization_level, bool) or
                self.optimization_level not in OPTIMIZATION_LEVEL_CUDAGRAPH_MODE):
            raise ValueError(f"--optimization-level (-O) {self.optimization_level!r} is not one of 0, 1, 2, 3")
        if self.gpu_memory_utilization is not None and not (
                isinstance(self.gpu_memory_utilization, (int, float)) and 0.0 < self.gpu_memory_utilization <= 1.0):
            raise ValueError(
                f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("--long-prefill-token-threshold must be >= 0 (0 = off), "
                             f"got {self.long_prefill_token_threshold!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"--kv-cache-dtype {self.kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)} "
                             "(vLLM's fp8_inc, *_ds_mla and turboquant layouts are not simulated)")
        for flag, value in (("--mamba-cache-dtype", self.mamba_cache_dtype),
                            ("--mamba-ssm-cache-dtype", self.mamba_ssm_cache_dtype)):
            if value not in MAMBA_DTYPES:
                raise ValueError(f"{flag} {value!r} is not one of {', '.join(MAMBA_DTYPES)}")
        if self.quantization is not None and self.quantization not in ONLINE_QUANTIZATION:
            raise ValueError(f"--quantization {self.quantization!r} is not simulated; valid: "
                             f"{', '.join(ONLINE_QUANTIZATION)} (online quantization of an unquantized checkpoint; "
                             "a quantized checkpoint needs no flag)")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"--scheduling-policy {self.scheduling_policy!r} is not one of "
                             f"{', '.join(SCHEDULING_POLICIES)}")
        if self.router not in ROUTERS:
            raise ValueError(f"--router {self.router!r} is not one of {', '.join(ROUTERS)}")
        if self.all2all_backend not in ALL2ALL_PRICED_AS:
            raise ValueError(f"--all2all-backend {self.all2all_backend!r} is not one of "
                             f"{', '.join(ALL2ALL_PRICED_AS)}")
        parse_vllm_version(self.vllm_version)
        if not isinstance(self.watermark, (int, float)) or isinstance(self.watermark, bool) \
                or not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"--watermark must be in [0, 1), got {self.watermark!r}")
        if self.performance_mode not in PERFORMANCE_MODES:
            raise ValueError(f"--performance-mode {self.performance_mode!r} is not one of "
                             f"{', '.join(PERFORMANCE_MODES)}")
        for flag, value, since in (("--performance-mode", self.performance_mode != "balanced", PERFORMANCE_MODE),
                                   ("--watermark", self.watermark, SCHEDULER_024),
                                   ("--prefill-schedule-interval", self.prefill_schedule_interval != 1,
                                    SCHEDULER_024),
                                   ("--max-num-active-seqs", self.max_num_active_seqs, SCHEDULER_031),
                                   ("--max-num-queued-reqs", self.max_num_queued_reqs is not None, QUEUED_LIMITS),
                                   ("--max-num-queued-tokens", self.max_num_queued_tokens is not None, QUEUED_LIMITS),
                                   ("--long-prefill-token-threshold-adaptive",
                                    self.long_prefill_token_threshold_adaptive, SCHEDULER_031),
                                   ("--[no-]scheduler-reserve-full-isl", self.scheduler_reserve_full_isl is not None,
                                    RESERVE_FULL_ISL_FLAG)):
            if value and self.vllm_release < since:
                raise ValueError(f"{flag} came with vLLM {since[0]}.{since[1]}; --vllm-version {self.vllm_version} "
                                 "has none (drop the flag or use a later release)")
        if self.speculative_config is not None and not isinstance(self.speculative_config, SpecDecodeConfig):
            raise ValueError(f"speculative_config must be a SpecDecodeConfig, got {self.speculative_config!r}")
        LoraConfig(self.max_loras, self.max_lora_rank, self.max_cpu_loras)      # the flags' checks, LoRA on or off
        if not self.enable_lora and (self.max_loras, self.max_lora_rank, self.max_cpu_loras) != (1, 16, None):
            raise ValueError("--max-loras / --max-lora-rank / --max-cpu-loras need --enable-lora (vLLM ignores them "
                             "without it)")
        if self.enable_lora and self.speculative_config is not None:
            raise ValueError("--enable-lora with --speculative-config is not simulated; use one of them")
        if self.block_size is not None and self.block_size % 16 != 0 and self.block_size not in (1, 2, 4, 8):
            raise ValueError(f"--block-size {self.block_size} is not valid; use 1, 2, 4, 8 or a multiple of 16")

    @property
    def lora(self) -> LoraConfig | None:
        """The LoRA configuration with --enable-lora, else None."""
        return LoraConfig(self.max_loras, self.max_lora_rank, self.max_cpu_loras) if self.enable_lora else None

    @property
    def effective_cudagraph_mode(self) -> str:
        """The cudagraph_mode vLLM runs: the user's, else the one the -O level sets (vLLM never
        overrides a user-set field with a level default); with --all2all-backend
        deepep_high_throughput and DP > 1, NONE whatever was set (its kernels are not CUDA-graph
        compatible: ``CompilationConfig``, 0.11-0.33; 0.10 ran PIECEWISE graphs without the MoE
        ops instead, taken as PIECEWISE)."""
        mode = self.cudagraph_mode or OPTIMIZATION_LEVEL_CUDAGRAPH_MODE[self.optimization_level]
        if self.all2all_backend == "deepep_high_throughput" and self.data_parallel_size > 1 and mode != "NONE":
            return "NONE" if self.vllm_release >= HT_WITHOUT_GRAPHS else "PIECEWISE"
        return mode

    @property
    def batched_dp_moe(self) -> bool:
        """vLLM's ``ParallelConfig.use_batched_dp_moe`` (from 0.20): --all2all-backend
        deepep_low_latency or nixl_ep with expert parallelism and DP > 1, whose kernels take at
        most max_num_batched_tokens tokens per rank; its default is then 256 (module doc)."""
        return (self.all2all_backend in BATCHED_DP_MOE_BACKENDS and self.enable_expert_parallel
                and self.data_parallel_size > 1 and self.vllm_release >= BATCHED_DP_MOE)

    @property
    def vllm_release(self) -> tuple[int, int]:
        """(major, minor) of ``vllm_version``."""
        return parse_vllm_version(self.vllm_version)

    @property
    def effective_async_scheduling(self) -> bool:
        """The user's --async-scheduling / --no-async-scheduling, else the default of
        ``vllm_version`` (on from vLLM 0.14, off before: ``ASYNC_BY_DEFAULT``)."""
        if self.async_scheduling is not None:
            return bool(self.async_scheduling)
        return self.vllm_release >= ASYNC_BY_DEFAULT

    @property
    def effective_scheduler_reserve_full_isl(self) -> bool:
        """The user's --[no-]scheduler-reserve-full-isl, else the release's: a request is admitted
        only when its whole prompt's KV blocks fit from vLLM 0.19, on its first chunk's before."""
        if self.scheduler_reserve_full_isl is not None:
            return self.scheduler_reserve_full_isl
        return self.vllm_release >= RESERVE_FULL_ISL_FLAG

    @property
    def effective_gpu_memory_utilization(self) -> float:
        """The user's --gpu-memory-utilization, else the default of ``vllm_version`` (0.92 from
        vLLM 0.20, 0.9 before)."""
        if self.gpu_memory_utilization is not None:
            return float(self.gpu_memory_utilization)
        return default_gpu_memory_utilization(self.vllm_release)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def parallel(self) -> ParallelSpec:
        """The parallel layout of one engine (one DP rank group of TP x PP GPUs per DP rank)."""
        return ParallelSpec.from_vllm(
            tp=self.tensor_parallel_size, pp=self.pipeline_parallel_size,
            dp=self.data_parallel_size, enable_expert_parallel=self.enable_expert_parallel,
            enable_eplb=self.enable_eplb, num_redundant_experts=self.num_redundant_experts)

    def mamba2_error(self, model: ModelSpec) -> str | None:
        """Why a Nemotron-H model (Mamba2 blocks: ``ModelSpec.block_pattern``) is not simulated with
        these arguments, or None: pipeline parallelism, speculative decoding and LoRA are not
        simulated on it."""
        why = [flag for flag, on in (("--pipeline-parallel-size > 1", self.pipeline_parallel_size > 1),
                                     ("--speculative-config", self.speculative_config is not None),
                                     ("--enable-lora", self.enable_lora)) if on]
        return f"{model.name} (Mamba2 hybrid) with {', '.join(why)} is not simulated" if why else None

    def resolve(self, model: ModelSpec, gpu: GpuSpec) -> "ResolvedEngine":
        """Fill the defaults of ``vllm serve`` on ``gpu`` as release ``vllm_version`` sets them
        (0.33's unless given; ``simulator.vllm_version``)."""
        given = None if self.max_model_len == AUTO_MAX_MODEL_LEN else self.max_model_len
        if given is None and model.max_position_embeddings < 1:
            raise ValueError(f"model {model.name!r} does not state max_position_embeddings; "
                             "give --max-model-len")
        max_model_len = given or model.max_position_embeddings    # auto: the model's, fitted to memory later
        if given is not None and given > model.max_position_embeddings:
            raise ValueError(
                f"--max-model-len {self.max_model_len} exceeds the model's max_position_embeddings "
                f"{model.max_position_embeddings}")
        spec = self.speculative_config
        draft_len = spec.draft.max_position_embeddings if spec is not None and spec.draft is not None else 0
        if 0 < draft_len < max_model_len:   # vLLM _limit_max_model_len_to_draft (model runner V2): lowered, a warning
            max_model_len = draft_len
        mem = gpu.memory_bytes
        if mem >= 160 * GiB and self.vllm_release >= LARGE_GPU_DEFAULTS:
            default_tokens, default_seqs = 16384, 1024
        elif mem >= 70 * GiB and "a100" not in gpu.name.lower():
            default_tokens, default_seqs = 8192, 1024
        else:
            default_tokens, default_seqs = 2048, 256
        if self.batched_dp_moe:
            default_tokens = BATCHED_DP_MOE_TOKENS
        if self.performance_mode == "throughput":    # doubles whichever of the two is defaulted
            default_tokens, default_seqs = 2 * default_tokens, 2 * default_seqs
        max_num_seqs = self.max_num_seqs or default_seqs
        if self.max_num_batched_tokens is None:
            max_num_batched_tokens = default_tokens
            if not self.enable_chunked_prefill:    # a whole prompt must fit in one step
                max_num_batched_tokens = (max(max_model_len, default_tokens)
                                          if self.vllm_release >= BUDGET_FROM_SEQS_X_LEN else max_model_len)
            if self.vllm_release >= BUDGET_FROM_SEQS_X_LEN:
                max_num_batched_tokens = min(max_num_seqs * max_model_len, max_num_batched_tokens)
        else:
            max_num_batched_tokens = self.max_num_batched_tokens
        if self.max_num_seqs is None:    # a defaulted max_num_seqs never exceeds the token budget
            max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
        if spec is not None and self.pipeline_parallel_size > 1 and not self.effective_async_scheduling:
            raise ValueError("--speculative-config with pipeline parallelism is simulated with async scheduling only "
                             "(--async-scheduling; the default from vLLM 0.14); use it or PP 1")
        if spec is not None and spec.method == "mtp" and not model.num_mtp_layers:
            raise ValueError(f"--speculative-config method mtp drafts with the checkpoint's multi-token-prediction "
                             f"layers; {model.name} has none (num_nextn_predict_layers): use eagle or eagle3")
        if spec is not None and spec.method == "mtp" and min(model.num_mtp_layers, spec.num_speculative_tokens) > 1:
            raise ValueError(f"--speculative-config mtp with {model.num_mtp_layers} MTP layers and "
                             f"{spec.num_speculative_tokens} drafts runs vLLM's multi-module MTP, which is not "
                             "simulated; use num_speculative_tokens 1")
        if spec is not None and model.num_linear_attention_layers:
            if spec.method != "mtp":
                raise ValueError(f"--speculative-config method {spec.method!r} with {model.name}'s Gated DeltaNet "
                                 "layers is not simulated; use its own MTP layer (method mtp)")
            if self.pipeline_parallel_size > 1:
                raise ValueError(f"--speculative-config with pipeline parallelism on {model.name}'s Gated DeltaNet "
                                 "layers is not simulated (vLLM's KV plan of the MTP layer on the last stage is not "
                                 "modelled); use --pipeline-parallel-size 1")
        if spec is not None and (why := draft_model_error(spec, model, self.tensor_parallel_size,
                                                          self.pipeline_parallel_size)):
            raise ValueError(why)
        if model.block_pattern and (why := self.mamba2_error(model)):
            raise ValueError(why)
        if self.enable_lora and (why := lora_error(model)):
            raise ValueError(why)
        if self.enable_lora and self.pipeline_parallel_size > 1:
            raise ValueError("--enable-lora with pipeline parallelism is not simulated; use --pipeline-parallel-size 1")
        block_size = self.block_size or (64 if model.is_mla else 16)
        model = served_model(model, self.quantization, self.kv_cache_dtype,
                             auto_is_model_dtype=self.vllm_release < KV_AUTO_FROM_CHECKPOINT)
        draft = None
        if spec is not None and spec.draft is not None:     # its own checkpoint's scheme, the target's KV dtype flag
            draft = served_model(spec.draft, None, self.kv_cache_dtype,
                                 auto_is_model_dtype=self.vllm_release < KV_AUTO_FROM_CHECKPOINT)
        if model.num_linear_attention_layers:
            model = with_mamba_dtypes(model, self.mamba_cache_dtype, self.mamba_ssm_cache_dtype)
        limits = dict(self.limit_mm_per_prompt)
        if self.language_model_only or (model.vision_modalities
                                        and all(limits.get(m, 1) == 0 for m in model.vision_modalities)):
            model = replace(model, has_vision_encoder=False, vision_params_sharded=0, vision_params_replicated=0,
                            vision=None)
        if self.mm_processor_kwargs:
            if model.vision is None:
                raise ValueError(f"--mm-processor-kwargs: {model.name} serves no images here")
            model = replace(model, vision=with_pixel_bounds(model.vision, dict(self.mm_processor_kwargs)))
        if self.mm_encoder_tp_mode == "data" and model.vision_params_sharded:     # every rank the whole tower
            model = replace(model, vision_params_sharded=0, vision_num_heads=0,
                            vision_params_replicated=model.vision_params_sharded + model.vision_params_replicated)
        return ResolvedEngine(
            args=self, model=model, gpu=gpu, parallel=self.parallel(),
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len, block_size=block_size, draft_model=draft)


MAMBA_DTYPES = ("auto", "float32", "float16", "bfloat16")    # vLLM's MambaDType


def with_mamba_dtypes(model: ModelSpec, mamba_cache_dtype: str, mamba_ssm_cache_dtype: str) -> ModelSpec:
    """A Gated DeltaNet model's state dtypes as vLLM 0.33 resolves them
    (``MambaStateDtypeCalculator._mamba_state_dtype``): the conv state in ``mamba_cache_dtype``
    (auto: the model dtype); the temporal state in ``mamba_ssm_cache_dtype``, else (auto) Qwen3.5's
    config ``mamba_ssm_dtype`` (its config hook sets it), else the conv state's dtype."""
    conv = "" if mamba_cache_dtype == "auto" else mamba_cache_dtype
    if mamba_ssm_cache_dtype != "auto":
        ssm = mamba_ssm_cache_dtype
    else:
        ssm = model.mamba_ssm_dtype or conv
    return replace(model, mamba_conv_dtype=conv, mamba_ssm_dtype=ssm)


def served_model(model: ModelSpec, quantization: str | None, kv_cache_dtype: str = "auto", *,
                 auto_is_model_dtype: bool = False) -> ModelSpec:
    """``model`` as vLLM serves it with ``--quantization`` (None or an ONLINE_QUANTIZATION key)
    and ``--kv-cache-dtype`` (a KV_CACHE_DTYPES value): module doc. ``auto_is_model_dtype``:
    "auto" stores the model dtype, not the checkpoint's KV scheme (releases before 0.14).
    ValueError for --quantization on a checkpoint that is already quantized."""
    if quantization is not None:
        if model.quant.method != "none":
            raise ValueError(f"--quantization {quantization} needs an unquantized checkpoint; {model.name} is "
                             f"already quantized ({model.quant.label}): drop the flag, vLLM serves the "
                             "checkpoint's own scheme")
        online = parse_quantization(ONLINE_QUANTIZATION[quantization])
        model = replace(model, quant=replace(online, kv_bytes_per_elem=model.quant.kv_bytes_per_elem))
    if kv_cache_dtype != "auto":
        model = replace(model, quant=replace(model.quant, kv_bytes_per_elem=kv_bytes_for_dtype(kv_cache_dtype)))
    elif auto_is_model_dtype and model.quant.kv_bytes_per_elem != model.quant.activation_bytes:
        model = replace(model, quant=replace(model.quant, kv_bytes_per_elem=model.quant.activation_bytes))
    return model


@dataclass(frozen=True)
class ResolvedEngine:
    """Engine arguments with every default filled in, plus the parsed model and GPU."""

    args: EngineArgs
    model: ModelSpec
    gpu: GpuSpec
    parallel: ParallelSpec
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int
    # --speculative-config method draft_model: the draft model as served (its checkpoint's scheme,
    # --kv-cache-dtype), None otherwise
    draft_model: ModelSpec | None = None

    def scheduler_config(self, debug: bool = False) -> SchedulerConfig:
        """The scheduler knobs of one engine, as vLLM derives them from these arguments."""
        a = self.args
        return SchedulerConfig(
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len, long_prefill_token_threshold=a.long_prefill_token_threshold,
            policy=a.scheduling_policy, async_scheduling=a.effective_async_scheduling, block_size=self.block_size,
            enable_chunked_prefill=a.enable_chunked_prefill, watermark=a.watermark,
            max_num_active_seqs=a.max_num_active_seqs,
            long_prefill_token_threshold_adaptive=a.long_prefill_token_threshold_adaptive,
            scheduler_reserve_full_isl=a.effective_scheduler_reserve_full_isl,
            prefill_schedule_interval=a.prefill_schedule_interval,
            enable_prefix_caching=a.enable_prefix_caching, debug=debug,
            pipeline_parallel_size=self.parallel.pp, num_speculative_tokens=self.num_spec_tokens,
            num_lookahead_tokens=a.speculative_config.num_lookahead_tokens if a.speculative_config else 0,
            num_draft_slots=a.speculative_config.num_draft_slots if a.speculative_config else 0,
            eagle_drafter=a.speculative_config is None or a.speculative_config.eagle_drafter,
            max_loras=a.max_loras if a.enable_lora else 0, encoder_budget=self.encoder_budget,
            disable_chunked_mm_input=a.disable_chunked_mm_input)

    @property
    def image_limit(self) -> int:
        """Images a request may carry: --limit-mm-per-prompt's image count (vLLM's default 999), 0
        when the served model's tower takes no images (none, or dropped)."""
        if self.model.vision is None or "image" not in self.model.vision_modalities:
            return 0
        return dict(self.args.limit_mm_per_prompt).get("image", 999)

    @property
    def encoder_budget(self) -> int:
        """The embeddings the vision tower may compute in a step and the encoder cache's size (vLLM
        ``compute_mm_encoder_budget``: max(--max-num-batched-tokens, the largest item of the enabled
        modalities)); 0 without a tower whose images are simulated."""
        tower = self.model.vision
        if tower is None or tower.image_error() is not None:
            return 0
        limits = dict(self.args.limit_mm_per_prompt)
        enabled = tuple(m for m in self.model.vision_modalities if limits.get(m, 999) > 0)
        if not enabled:
            return 0
        largest = tower.max_tokens_per_item(enabled)
        if self.args.disable_chunked_mm_input and largest > self.max_num_batched_tokens:
            raise ValueError(f"--disable-chunked-mm-input: the largest image item ({largest} tokens) exceeds "
                             f"--max-num-batched-tokens {self.max_num_batched_tokens}; raise it (vLLM refuses this too)")
        return max(self.max_num_batched_tokens, largest)

    @property
    def num_spec_tokens(self) -> int:
        """Drafts per request and step (--speculative-config's num_speculative_tokens; 0 = off)."""
        spec = self.args.speculative_config
        return spec.num_speculative_tokens if spec is not None else 0

    @property
    def vllm_version(self) -> tuple[int, int]:
        """(major, minor) of the vLLM release whose model kernels, KV budget and defaults to
        reproduce."""
        return self.args.vllm_release

    @property
    def max_cudagraph_capture_size(self) -> int | None:
        """The user's ``--max-cudagraph-capture-size``, or the architecture's override
        (ARCH_MAX_CUDAGRAPH_CAPTURE) when neither capture flag is given; None = vLLM's grid."""
        a = self.args
        if a.cudagraph_capture_sizes is None and a.max_cudagraph_capture_size is None:
            return ARCH_MAX_CUDAGRAPH_CAPTURE.get(self.model.architecture)
        return a.max_cudagraph_capture_size

    def kv_cache_manager(self, num_gpu_blocks: int, layout: KVLayout | None = None,
                         connector: bool = False) -> KVCacheManager:
        """The KV-cache manager of one engine rank over ``num_gpu_blocks`` blocks (its memory
        budget's), with these arguments' block size, max_model_len, prefix caching and watermark.
        Given the budget's ``layout``, a model with sliding-window or chunked (Llama 4) layers
        gets vLLM's hybrid manager, one block table per KV cache group (behind a KV ``connector`` too, as vLLM's
        NixlConnector supports it); speculative decoding behind a connector, or no layout, keeps
        one full-attention group (README limits). A Gated DeltaNet model's layout (mamba groups)
        gets its state blocks beside its full-attention table: with prefix caching vLLM's "align"
        mamba cache mode (``AlignStateKVCacheManager``: states at block boundaries, block-aligned
        prefill chunks), without it the "none" mode (``StateKVCacheManager``: one state block per
        request and group)."""
        a = self.args
        if layout is not None and layout.mamba_blocks_per_request:
            if why := gdn_simulation_error(a):
                raise ValueError(why)
            groups = sum(g.kind == "mamba" for g in layout.groups)
            if a.enable_prefix_caching:
                return AlignStateKVCacheManager(num_gpu_blocks, self.block_size, self.max_model_len, groups,
                                                watermark=a.watermark, num_speculative_blocks=self.num_spec_tokens)
            return StateKVCacheManager(num_gpu_blocks, self.block_size, self.max_model_len, groups,
                                       watermark=a.watermark, num_speculative_blocks=self.num_spec_tokens)
        if layout is not None and layout.local_window and not (connector and a.speculative_config):
            local = "chunked" if layout.attention_chunk_size else "sliding"
            first = local if self.model.is_sliding_layer(0) or self.model.is_chunked_layer(0) else "full"
            groups = sorted(layout.groups, key=lambda g: g.kind != first)     # vLLM: layer 0's kind first
            in_flight = max_in_flight_tokens(self.max_num_batched_tokens, self.parallel.pp,
                                             a.effective_async_scheduling)
            return HybridKVCacheManager(
                num_gpu_blocks, self.block_size, self.max_model_len,
                tuple(layout.local_window if g.kind == local else 0 for g in groups), in_flight,
                enable_prefix_caching=a.enable_prefix_caching, watermark=a.watermark, chunked=local == "chunked")
        return KVCacheManager(num_gpu_blocks, self.block_size, self.max_model_len,
                              enable_prefix_caching=a.enable_prefix_caching, watermark=a.watermark)

    @property
    def cudagraph_mode(self) -> str:
        """The cudagraph_mode the engine runs (``EngineArgs.effective_cudagraph_mode``), after
        the attention backends' CUDA-graph support: Llama 4's chunked local-attention backend
        supports none (``AttentionCGSupport.NEVER`` from vLLM 0.11), so FULL decode graphs fall
        back to PIECEWISE (attention compiled piecewise: FULL_AND_PIECEWISE, the default, and
        FULL_DECODE_ONLY), and FULL is refused as vLLM refuses it."""
        mode = self.args.effective_cudagraph_mode
        if not self.model.attention_chunk_size or self.vllm_version < CHUNKED_LOCAL_NO_FULL_GRAPHS:
            return mode
        if mode == "FULL":
            raise ValueError(f"--compilation-config cudagraph_mode FULL is not supported with {self.model.name}'s "
                             "chunked local attention backend (no CUDA-graph support); valid: PIECEWISE, "
                             "FULL_AND_PIECEWISE (run as PIECEWISE), NONE")
        return "PIECEWISE" if mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY") else mode

    def cudagraph_config(self) -> CudaGraphConfig:
        """The CUDA graphs of one engine, as VllmConfig derives them from these arguments (a
        uniform decode has 1 + num_spec_tokens tokens per request)."""
        a = self.args
        return CudaGraphConfig.from_vllm(
            self.max_num_seqs, self.max_num_batched_tokens, enforce_eager=a.enforce_eager,
            sm_version=self.gpu.sm_version, num_spec_tokens=self.num_spec_tokens,
            cudagraph_capture_sizes=a.cudagraph_capture_sizes,
            max_cudagraph_capture_size=self.max_cudagraph_capture_size,
            cudagraph_mode=self.cudagraph_mode, vllm_version=self.vllm_version,
            interactivity=a.performance_mode == "interactivity")

    @property
    def gpus_per_engine(self) -> int:
        """GPUs of one engine (scheduler): one DP rank's TP x PP group."""
        return self.parallel.tp * self.parallel.pp

    @property
    def num_engines(self) -> int:
        """Engines (schedulers with their own KV cache): replicas x data-parallel ranks."""
        return self.args.num_replicas * self.args.data_parallel_size

    @property
    def lockstep_dp(self) -> bool:
        """MoE models with DP > 1: the DP ranks' forwards run in lockstep (vLLM DPEngineCoreProc)."""
        return self.model.is_moe and self.args.data_parallel_size > 1

    @property
    def num_gpus(self) -> int:
        return self.num_engines * self.gpus_per_engine


def gdn_simulation_error(args: EngineArgs) -> str | None:
    """Why a Gated DeltaNet model (Qwen3.5, Qwen3-Next) is not simulated as asked, or None: with
    prefix caching but chunked prefill off, which vLLM refuses at start-up ("Chunked prefill is
    required for Mamba prefix caching")."""
    if args.enable_prefix_caching and not args.enable_chunked_prefill:
        return (f"{args.model}: vLLM requires chunked prefill for Gated DeltaNet prefix caching (its \"align\" mamba "
                "cache mode) and would not start; drop --no-enable-chunked-prefill or add --no-enable-prefix-caching")
    return None


MM_ENCODER_TP_MODES = ("weights", "data")


def mm_processor_kwargs(value) -> tuple[tuple[str, Any], ...]:
    """--mm-processor-kwargs as sorted (key, value) pairs, from vLLM's JSON text, a mapping or
    pairs; ValueError (one line) for anything else (the keys are checked against the tower later)."""
    raw = value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"--mm-processor-kwargs {raw!r} is not JSON; give e.g. '{{\"max_pixels\": 1003520}}'") \
                from None
    if isinstance(value, (tuple, list)) and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in value):
        value = dict(value)
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"--mm-processor-kwargs {raw!r} must map names to values, e.g. '{{\"max_pixels\": 1003520}}'")
    return tuple(sorted(value.items()))


def mm_limits(value) -> tuple[tuple[str, int], ...]:
    """--limit-mm-per-prompt as sorted (modality, count) pairs, from vLLM's JSON text, a mapping (a
    scenario file's) or pairs; a modality's value may be its count or vLLM's {"count": N, ...}
    (the dummy-input sizes beside it are not used). ValueError (one line) for anything else."""
    raw = value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"--limit-mm-per-prompt {raw!r} is not JSON; give e.g. "
                             "'{\"image\": 0, \"video\": 0}'") from None
    if isinstance(value, (tuple, list)) and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in value):
        value = dict(value)
    if not isinstance(value, dict):
        raise ValueError(f"--limit-mm-per-prompt {raw!r} must map modalities to counts, e.g. "
                         "'{\"image\": 0, \"video\": 0}'")
    out = []
    for modality, count in value.items():
        if isinstance(count, dict):
            count = count.get("count", 999)
        if not isinstance(modality, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"--limit-mm-per-prompt {modality!r}: {count!r}; counts are integers >= 0")
        out.append((modality, count))
    return tuple(sorted(out))
