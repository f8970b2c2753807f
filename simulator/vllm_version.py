"""The vLLM release whose kernels, KV budget and defaults to reproduce (``--vllm-version``).

The simulator follows vLLM 0.33 (``../shared/reference/engine-semantics.md``). Some model kernels,
the start-up KV budget, a few engine defaults (``--kv-cache-dtype auto`` and ``--async-scheduling``
among them), the DP load balancer and the lockstep DP ranks' padding changed between the releases
that measured deployments ran (0.11-0.19 and nightlies in AIConfigurator's silicon data)
and 0.33; ``--vllm-version`` picks those (the five tables below), and only those: the scheduler
(but its admission gate: the first chunk's KV blocks before 0.19, the whole prompt's after), the
KV-cache manager and every other default stay 0.33's whatever it says.

Model kernels (``simulator.batch_engine``):

| since  | what changed (before -> from then on)                                                       |
|--------|---------------------------------------------------------------------------------------------|
| 0.23.0 | MiniMax-M2's router: cast to fp32 + fp32 ``F.linear`` (an SGEMM) at every size on every GPU |
|        | -> ``GateLinear``: a dedicated fp32 kernel up to 32 tokens on sm_90 / sm_100-family GPUs,   |
|        | the cast + SGEMM above that                                                                 |
| 0.23.0 | MiniMax-M2's TP-wide q/k norm: variance, all-reduce (TP > 1) and apply at every size        |
|        | -> one fused Lamport all-reduce + norm kernel at TP > 1 up to 2,048 tokens                  |
| 0.26.0 | MiniMax-M2's router above 32 tokens on the sm_100 family: cast + SGEMM -> the bf16x3        |
|        | CuteDSL GEMM                                                                                |

Read in the release wheels (``pip download --no-deps vllm==X``; their ``vllm/_version.py`` dates):
0.11.2, 0.12.0, 0.16.0 (2026-02-25) and 0.19.0 (2026-04-03) build the gate as a
``ReplicatedLinear`` with fp32 weights and call ``self.gate(hidden_states.to(torch.float32))``,
and norm q and k with ``MiniMaxText01RMSNormTP.forward_qk`` (torch ops: variance,
``tensor_model_parallel_all_reduce``, apply); so do 0.20.0 (2026-04-27) and 0.22.0 (2026-05-29).
0.23.0 (2026-06-15) brings ``GateLinear`` (tiers: DSV3 kernel, the fp32 kernel for hidden 3072 x
256 experts up to ``FP32_MAX_TOKENS`` = 32, cuBLAS bf16 -> fp32, ``F.linear``) and
``minimax_rms_norm`` (fused kernel up to ``MINIMAX_QK_NORM_MAX_TOKEN_NUM`` = 2048 at TP > 1, else
a compiled fallback of the same three steps); 0.24.0 and 0.25.0 have no bf16x3 tier, 0.26.0
(2026-07-25) to 0.33.0 have it. Each release not read lies between two read ones that agree
(0.10 and 0.11.0, which had no MiniMax-M2, are taken as 0.11.2).

KV budget at start-up (``simulator.memory.kv_budget``; read in every release wheel from 0.10.2 to
0.33.0 but 0.17 and 0.18: ``vllm/config/cache.py``, ``vllm/envs.py``, ``vllm/v1/worker/
gpu_worker.py`` and ``utils.py``, ``vllm/v1/kv_cache_interface.py``, ``vllm/v1/core/
kv_cache_utils.py``):

| since  | what changed (before -> from then on)                                                       |
|--------|---------------------------------------------------------------------------------------------|
| 0.14.0 | requested memory: total x utilization as a float -> its ceil (``request_memory``)           |
| 0.20.0 | ``--gpu-memory-utilization`` default 0.9 -> 0.92                                            |
| 0.20.0 | the CUDA-graph memory estimate is subtracted from the KV budget                             |
|        | (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` default "0" -> "1"; 0.16 has no estimate,     |
|        | 0.19 computes it and subtracts it only when the variable is set)                            |
| 0.21.0 | logged "GPU KV cache size: N tokens": num_blocks // groups x block size ->                  |
|        | int(max concurrency at max_model_len x max_model_len)                                       |
| 0.14.0 | chunked local attention (Llama 4): one KV group of every layer, all as full attention       |
|        | (``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` default "0": 0.10.2-0.13.0) ->      |
|        | the hybrid manager's chunked groups (default "1"; read in the 0.10.2-0.14.0 and             |
|        | 0.16.0-0.33.0 wheels); with an EAGLE drafter it stays off in every release                  |
| 0.26.0 | a sliding-window group reserves sliding_window - 1 + max_num_batched_tokens tokens per      |
|        | request -> sliding_window - 1 + the tokens in flight (max_num_batched_tokens x (pp + 1)     |
|        | with async scheduling); a chunked group attention_chunk_size + either (0.14.0, 0.25.0 and   |
|        | 0.26.0 read)                                                                                |

Engine defaults (``simulator.engine_args``, ``simulator.cuda_graph``; ``vllm/engine/arg_utils.py``
and ``vllm/config/vllm.py`` of the same wheels):

| since  | what changed (before -> from then on)                                                       |
|--------|---------------------------------------------------------------------------------------------|
| 0.11.0 | chunked local attention (Llama 4): its backend takes the underlying one's CUDA-graph       |
|        | support -> none (``AttentionCGSupport.NEVER``): FULL decode graphs run PIECEWISE (the       |
|        | default FULL_AND_PIECEWISE and FULL_DECODE_ONLY), FULL is refused (read in the 0.10.2,      |
|        | 0.11.0, 0.12.0-0.14.0, 0.18.0, 0.22.0, 0.26.0, 0.30.0 and 0.33.0 wheels)                    |
| 0.11.0 | --all2all-backend deepep_high_throughput with DP > 1: PIECEWISE CUDA graphs without the MoE |
|        | ops (taken as PIECEWISE) -> no CUDA graphs (read in the 0.10.2, 0.11.0 and 0.12.0-0.33.0    |
|        | wheels: ``platforms/cuda.py``, then ``CompilationConfig``)                                  |
| 0.12.0 | a defaulted max_num_batched_tokens: the tier's value -> also at most max_num_seqs x         |
|        | max_model_len; with --no-enable-chunked-prefill max_model_len -> max(max_model_len, the     |
|        | tier's value) (read in the 0.10.2, 0.11.0 and 0.12.0 wheels)                                |
| 0.14.0 | ``--max-model-len auto`` / -1: refused -> the longest request the KV cache holds, at most   |
|        | the model's (``_auto_fit_max_model_len``; read in the 0.12.0 and 0.14.0 wheels)             |
| 0.14.0 | ``--async-scheduling``: off -> on unless something rules it out (``VllmConfig``: pp > 1,   |
|        | non-EAGLE speculative decoding, another executor; read in the 0.12.0, 0.13.0 and 0.14.0    |
|        | wheels' ``vllm/config/vllm.py`` and ``scheduler.py``); the simulator keeps 0.33's pp > 1   |
|        | batch queue                                                                                 |
| 0.14.0 | ``--kv-cache-dtype auto``: the model dtype -> the checkpoint's KV scheme (a modelopt        |
|        | ``kv_cache_quant_algo`` or compressed-tensors ``kv_cache_scheme``, e.g. FP8), via           |
|        | ``resolve_kv_cache_dtype_string`` (read in the 0.12.0, 0.13.0, 0.14.0 and 0.16.0 wheels)    |
| 0.17.0 | ``--performance-mode`` (none -> balanced, interactivity, throughput: throughput doubles     |
|        | the defaulted max_num_batched_tokens and max_num_seqs, interactivity captures every CUDA    |
|        | graph size 1..32; read in the 0.16.0, 0.17.0 and 0.18.0-0.33.0 wheels); refused before      |
| 0.19.0 | a waiting request is admitted when its first chunk's KV blocks fit -> when its whole        |
|        | prompt's do (``scheduler_reserve_full_isl``, on by default; read in the 0.16.0, 0.18.0,     |
|        | 0.19.0 and 0.20.0 wheels); the flag ``--[no-]scheduler-reserve-full-isl`` is refused before |
| 0.20.0 | --all2all-backend deepep_low_latency / nixl_ep with EP and DP > 1: the MoE layer runs the   |
|        | ranks' tokens in chunks of ``VLLM_MOE_DP_CHUNK_SIZE`` = 256 per rank (also mori and         |
|        | flashinfer_all2allv; ``use_dp_chunking``) -> no chunks; max_num_batched_tokens defaults to  |
|        | 256 instead (``use_batched_dp_moe``; 0.19.0 has the chunks, 0.20.0-0.33.0 the default).     |
|        | The chunks are not modelled: a run of an earlier release with these kernels says so         |
|        | (``moe_dp_chunk_note``) and prices each step's MoE as one chunk                             |
| 0.21.0 | default CUDA-graph sizes: max_num_batched_tokens appended when it fits under the ceiling    |
| 0.24.0 | ``--watermark`` (KV blocks kept free when admitting waiting / preempted requests) and       |
|        | ``--prefill-schedule-interval`` exist (read in the 0.19.0-0.32.0 wheels'                    |
|        | ``vllm/config/scheduler.py``); refused before                                               |
| 0.28.0 | GPUs of >= 160 GiB (B200, B300): max_num_batched_tokens default 8192 -> 16384 for the API   |
|        | server; the capture ceiling of the sm_100 family 512 -> 1024                                |
| 0.29.0 | default CUDA-graph sizes: the uniform-decode sizes (max_num_seqs, and with speculative      |
|        | decoding a request-count grid x (1 + spec tokens)) appended                                 |
| 0.29.0 | ``--max-num-queued-reqs`` / ``--max-num-queued-tokens`` (the API server refuses a request   |
|        | with HTTP 503 past them) exist; refused before                                              |
| 0.31.0 | ``--max-num-active-seqs`` and ``--long-prefill-token-threshold-adaptive`` exist; refused    |
|        | before                                                                                      |

DP load balancer (``simulator.dp_group``; ``vllm/v1/engine/core_client.py``, read in every wheel
from 0.10.2 to 0.33.0):

| since  | what changed (before -> from then on)                                                       |
|--------|---------------------------------------------------------------------------------------------|
| 0.27.0 | a rank's score: waiting x 4 + running, scan from rank 0 -> waiting + running + waiting x 6  |
|        | x max(0, KV usage - 0.5), the scan start advancing one rank per pick                        |

Lockstep DP padding (``simulator.batch_engine.BatchEngine.lockstep_costs``; ``vllm/v1/worker/
dp_utils.py`` and ``gpu_model_runner.py``, read in the 0.11.0, 0.12.0, 0.14.0, 0.16.0, 0.17.0,
0.18.0, 0.19.0 and 0.33.0 wheels):

| since  | what changed (before -> from then on)                                                       |
|--------|---------------------------------------------------------------------------------------------|
| 0.17.0 | every DP rank pads its tokens to the busiest rank's whenever CUDA graphs are configured     |
|        | (``allow_dp_padding``; 0.11: ``get_dp_padding`` unless ``--enforce-eager``) -> only when    |
|        | the step's CUDA-graph mode, the minimum over the ranks, is not NONE (``should_dp_pad``): a  |
|        | rank running eager (a prefill above the capture sizes) makes every rank run its own tokens, |
|        | the MoE layers gathering the ranks' real token counts                                       |

Not followed per release: the fused-MoE kernel vLLM picks for block-FP8 experts on Hopper. The
calibrated tables time vLLM 0.24.0's choice, which 0.17.0 introduced (``_get_priority_backends``
in ``fused_moe/oracle/fp8.py``: Triton at EP 1, FlashInfer CUTLASS at EP > 1; AIC's H100 / H200
fp8_block rows hold exactly those two kernels). 0.15.1 and 0.16.0 have no such rule and take the
first supported backend, FlashInfer CUTLASS, at every EP size; 0.12.0-0.14.0 run DeepGEMM's
contiguous grouped GEMM when deep_gemm is installed (vLLM's Docker images ship it, we believe; not
checked here) and the MoE TP size is below 8, for every batch: ``_valid_deep_gemm``'s >= 128-token and
width > 512 conditions are skipped while ``is_deep_gemm_e8m0_used()`` holds, which
``VLLM_USE_DEEP_GEMM_E8M0`` (default 1) makes true on Hopper too, and each call computes ``M x
top-k + local experts x 127`` rows rounded to 128 (the padding rows as expert 0), ~16k rows for 128
local experts whatever the batch (0.13.0 reads the same). No table times FlashInfer CUTLASS at EP 1
or DeepGEMM's grouped GEMM, so those releases are priced with 0.24.0's kernel, and a run says so
(``moe_kernel_note``: the summary's ``pricing_notes``; bench/README.md, 2026-12-01 08:00 and 11:30
UTC).
"""

from __future__ import annotations

import re

SEMANTICS = (0, 33)          # the release the simulator follows (major, minor)
OLDEST = (0, 10)             # the oldest release the simulator accepts (vLLM v1 engine era)
DEFAULT = "0.33.0"

MINIMAX_GATE_LINEAR = (0, 23)     # GateLinear: dedicated fp32 router kernel up to 32 tokens
MINIMAX_FUSED_QK_NORM = (0, 23)   # fused Lamport all-reduce + q/k norm up to 2,048 tokens
BF16X3_ROUTER = (0, 26)           # bf16x3 CuteDSL router GEMM on the sm_100 family

REQUEST_CEIL = (0, 14)            # requested memory = ceil(total x utilization)
KV_AUTO_FROM_CHECKPOINT = (0, 14)  # --kv-cache-dtype auto resolves to the checkpoint's KV scheme (model dtype before)
ASYNC_BY_DEFAULT = (0, 14)        # --async-scheduling default: off -> on
UTILIZATION_092 = (0, 20)         # --gpu-memory-utilization default 0.92 (0.9 before)
CUDAGRAPH_ESTIMATE = (0, 20)      # the CUDA-graph memory estimate is subtracted
LOGGED_BY_CONCURRENCY = (0, 21)   # "GPU KV cache size" = int(max concurrency x max_model_len)
WINDOW_IN_FLIGHT = (0, 26)        # sliding-window (and chunked) reservation counts the tokens in flight
CHUNKED_LOCAL_HYBRID = (0, 14)    # chunked local attention (Llama 4) in the hybrid KV cache manager by default
CHUNKED_LOCAL_NO_FULL_GRAPHS = (0, 11)  # its attention backend supports no CUDA graph: FULL decode -> PIECEWISE

HT_WITHOUT_GRAPHS = (0, 11)       # deepep_high_throughput x DP > 1: CUDA graphs NONE (PIECEWISE without MoE before)
BUDGET_FROM_SEQS_X_LEN = (0, 12)  # defaulted max_num_batched_tokens: min(max_num_seqs x max_model_len, ...);
                                  # without chunked prefill max(max_model_len, the default) (max_model_len before)
MAX_MODEL_LEN_AUTO = (0, 14)      # --max-model-len auto / -1: fitted to the KV cache
RESERVE_FULL_ISL_FLAG = (0, 19)   # admission checks the whole prompt's blocks (the first chunk's before); the flag
SCHEDULER_024 = (0, 24)           # --watermark, --prefill-schedule-interval
QUEUED_LIMITS = (0, 29)           # --max-num-queued-reqs / --max-num-queued-tokens (API-server 503s)
SCHEDULER_031 = (0, 31)           # --max-num-active-seqs, --long-prefill-token-threshold-adaptive
PERFORMANCE_MODE = (0, 17)        # --performance-mode (balanced / interactivity / throughput) exists
BATCHED_DP_MOE = (0, 20)          # max_num_batched_tokens default 256 under deepep_low_latency / nixl_ep x DP x EP
# before BATCHED_DP_MOE: the MoE layers run in chunks of VLLM_MOE_DP_CHUNK_SIZE (256) tokens per rank with
# these kernels (default_moe_runner.use_dp_chunking, 0.12.0-0.19.0 wheels); not modelled, a pricing note
MOE_DP_CHUNK_TOKENS = 256
# (0.33's --all2all-backend names; 0.19's "mori" is both MoRI ones)
MOE_DP_CHUNKED_BACKENDS = ("deepep_low_latency", "mori_high_throughput", "mori_low_latency", "flashinfer_all2allv",
                           "flashinfer_nvlink_two_sided", "nixl_ep")
LARGE_GPU_DEFAULTS = (0, 28)      # >= 160 GiB GPUs: max_num_batched_tokens 16384 (8192 before)
SM100_CAPTURE_1024 = (0, 28)      # CUDA-graph capture ceiling 1024 on the sm_100 family (512 before)
CAPTURE_APPENDS_BATCH_TOKENS = (0, 21)   # max_num_batched_tokens appended to the capture sizes
CAPTURE_UNIFORM_DECODE = (0, 29)  # uniform-decode sizes (max_num_seqs x (1 + spec tokens)) captured
DP_KV_PENALTY = (0, 27)           # DP load balancer: waiting + running + KV-pressure term (4 x waiting + running before)
DP_PAD_GRAPHS_ONLY = (0, 17)      # lockstep DP ranks pad to the busiest only when every rank runs a CUDA graph

# Hopper block-FP8 MoE kernels the calibrated tables (vLLM 0.24.0's) do not time; releases read in their
# wheels (the module doc, "Not followed per release"): a pricing note, the price unchanged
DEEPGEMM_MOE_EVERY_BATCH = ((0, 12), (0, 15))   # [from, to): DeepGEMM over padded rows at MoE TP < 8 (0.12-0.14)
FLASHINFER_CUTLASS_MOE_EP1 = ((0, 15), (0, 17))  # [from, to): FlashInfer CUTLASS at EP 1 too (0.15.1, 0.16.0)


def default_gpu_memory_utilization(version: tuple[int, int]) -> float:
    """vLLM's ``--gpu-memory-utilization`` default in that release."""
    return 0.92 if version >= UTILIZATION_092 else 0.9

_PATTERN = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_vllm_version(text: str) -> tuple[int, int]:
    """(major, minor) of a vLLM release string such as "0.19.0", "0.19" or "v0.19.1"; a clear
    ValueError for anything else or a release outside OLDEST .. SEMANTICS."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        raise ValueError(f"--vllm-version {text!r} is a number, not a release (a scenario file reads 0.20 as "
                         f"0.2); quote it, e.g. vllm-version: \"0.20.0\"")
    match = _PATTERN.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"--vllm-version {text!r} is not a vLLM release; give MAJOR.MINOR[.PATCH], "
                         f"e.g. 0.19.0 (valid: {_name(OLDEST)} to {_name(SEMANTICS)})")
    version = (int(match.group(1)), int(match.group(2)))
    if not OLDEST <= version <= SEMANTICS:
        raise ValueError(f"--vllm-version {text} is outside {_name(OLDEST)} to {_name(SEMANTICS)}, "
                         f"the releases the simulator knows ({_name(SEMANTICS)} is the one it follows)")
    return version


def _name(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def moe_dp_chunk_note(version: tuple[int, int], all2all_backend: str, dp: int, ep: int) -> str | None:
    """One line when this release runs the MoE layers in ``VLLM_MOE_DP_CHUNK_SIZE`` chunks, which the
    simulator does not (before 0.20, ``use_dp_chunking``: these kernels with DP x EP), else None."""
    if version >= BATCHED_DP_MOE or all2all_backend not in MOE_DP_CHUNKED_BACKENDS or dp < 2 or ep < 2:
        return None
    return (f"vLLM {_name(version)} runs the MoE layers with --all2all-backend {all2all_backend} in chunks of "
            f"{MOE_DP_CHUNK_TOKENS} tokens per DP rank (VLLM_MOE_DP_CHUNK_SIZE), a dispatch, the experts and a "
            f"combine per chunk, which is not modelled: steps above {MOE_DP_CHUNK_TOKENS} tokens per rank are "
            "priced as one chunk (simulator/vllm_version.py)")


def moe_kernel_note(version: tuple[int, int], sm_version: int, quant_method: str, moe_tp: int,
                    ep: int) -> str | None:
    """One line naming the fused-MoE kernel this release runs for the layout that the calibrated tables
    do not time (their kernels are vLLM 0.24.0's: Triton at EP 1, FlashInfer CUTLASS at EP > 1, for
    block-FP8 experts on Hopper), or None when the tables time it. ``moe_tp`` / ``ep``: the experts'
    tensor- and expert-parallel sizes (vLLM's MoE TP size is 1 under expert parallelism)."""
    if sm_version != 90 or quant_method != "fp8_block":
        return None
    release, table = f"vLLM {_name(version)}", "Triton" if ep == 1 else "FlashInfer CUTLASS"
    if DEEPGEMM_MOE_EVERY_BATCH[0] <= version < DEEPGEMM_MOE_EVERY_BATCH[1] and moe_tp < 8:
        return (f"{release} runs these block-FP8 experts (MoE TP {moe_tp} < 8) on DeepGEMM's grouped GEMM "
                f"for every batch when deep_gemm is installed, over tokens x top-k + local experts x 127 "
                f"padded rows, which is not modelled (calibrated costs price vLLM 0.24's {table} kernel): "
                f"small-batch MoE may be priced low (simulator/vllm_version.py)")
    if FLASHINFER_CUTLASS_MOE_EP1[0] <= version < FLASHINFER_CUTLASS_MOE_EP1[1] and ep == 1:
        return (f"{release} runs these block-FP8 experts at EP 1 on FlashInfer CUTLASS, which no table times "
                f"(calibrated costs price vLLM 0.24's Triton kernel; simulator/vllm_version.py)")
    return None
