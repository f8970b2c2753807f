"""The ``frontier`` command line. Flag names follow ``vllm serve`` and ``vllm bench serve``.

Every option defaults to ``None`` here so that three sources can be merged in
a fixed order: an explicit flag wins over the scenario file (``--config``),
which wins over vLLM's defaults (held by the frozen configs themselves).
Errors in user input are printed as one line and exit with status 2.
"""

from __future__ import annotations

import json
import sys
import typing
from dataclasses import astuple, fields
from pathlib import Path
from typing import Any, Optional

import typer

from frontier.out_path import check_dir_path, check_file_path

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Frontier: simulate LLM serving deployments on a CPU, faithfully to vLLM.")

ENGINE_HELP = "Engine (vllm serve flags)"
MAMBA_DTYPE_HELP = ("auto, float32, float16 or bfloat16: the conv state of Gated DeltaNet layers (Qwen3.5, Qwen3-Next; "
                    "auto: the model dtype).")
MAMBA_SSM_DTYPE_HELP = ("auto, float32, float16 or bfloat16: their temporal state (auto: Qwen3.5's config "
                        "mamba_ssm_dtype, float32, else --mamba-cache-dtype's).")
BENCH_HELP = "Workload (vllm bench serve flags)"
OUT_HELP = "Outputs"
PDD_HELP = "Prefill/decode disaggregation (--architecture pdd)"
ROLE_KEYS = ("tp", "pp", "dp", "replicas", "gpu", "router", "max_num_seqs", "max_num_batched_tokens")
PDD_KEYS = tuple(f"{role}_{k}" for role in ("prefill", "decode") for k in ROLE_KEYS) + (
    "kv_transfer_bandwidth", "kv_transfer_latency_ms")
AFD_HELP = "Attention/FFN disaggregation (--architecture afd; prefill uses --prefill-*)"
SGLANG_HELP = "SGLang engine (--engine sglang; sglang.launch_server flags)"
ENGINES = ("vllm", "sglang")
# vLLM flags that --engine sglang takes as they are; every other vLLM engine flag is refused there,
# with SGLang's own flag for the same setting where it has one (VLLM_TO_SGLANG).
SGLANG_SHARED_KEYS = ("model", "gpu", "tensor_parallel_size", "data_parallel_size", "num_replicas", "router",
                      "kv_cache_dtype", "quantization", "language_model_only")
VLLM_TO_SGLANG = {"max_num_seqs": "--max-running-requests", "max_num_batched_tokens": "--chunked-prefill-size",
                  "max_model_len": "--context-length", "gpu_memory_utilization": "--mem-fraction-static",
                  "kv_cache_memory_bytes": "--max-total-tokens", "num_gpu_blocks_override": "--max-total-tokens",
                  "enable_prefix_caching": "--disable-radix-cache", "enable_chunked_prefill": "--chunked-prefill-size -1",
                  "async_scheduling": "--disable-overlap-schedule", "enforce_eager": "--disable-cuda-graph",
                  "scheduling_policy": "--schedule-policy", "block_size": "--page-size",
                  "enable_expert_parallel": "--ep-size",
                  "max_cudagraph_capture_size": "--cuda-graph-max-bs", "cudagraph_capture_sizes": "--cuda-graph-max-bs"}
AFD_KEYS = ("attention_tp", "attention_dp", "attention_replicas", "attention_gpu",
            "ffn_tp", "ffn_ep", "ffn_replicas", "ffn_gpu", "afd_lanes", "afd_link_bandwidth")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _merge(cli: dict[str, Any], config: Optional[Path], valid: tuple[str, ...],
           types: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scenario file's settings (``types``: the command's parameter types, which its values are
    checked against as the flags would be parsed, ``_typed``) overridden by the flags given."""
    from frontier.scenario import load_scenario
    merged = load_scenario(config, valid) if config is not None else {}
    merged = {k: _typed(k, v, (types or {}).get(k)) for k, v in merged.items()}
    merged.update({k: v for k, v in cli.items() if v is not None})
    return merged


# Scenario keys whose values may be richer than the flag's text: a YAML list of capture sizes or of
# LoRA adapter names, a mapping for --compilation-config or --limit-mm-per-prompt, and --vllm-version, whose number (0.20 read as 0.2) gets its
# own message downstream.
_UNTYPED_SCENARIO_KEYS = ("cudagraph_capture_sizes", "compilation_config", "eplb_config", "vllm_version",
                          "speculative_config", "spec_acceptance_rate", "cuda_graph_bs", "limit_mm_per_prompt",
                          "lora_modules", "random_mm_limit_mm_per_prompt", "random_mm_bucket_config",
                          "mm_processor_kwargs", "goodput", "percentile_metrics", "metric_percentiles")


def _typed(key: str, value: Any, hint: Any) -> Any:
    """A scenario value as its flag would be parsed: switches true / false, integers and numbers
    (numeric text accepted), names and paths single values (numbers taken as text); ValueError
    (one line) otherwise. A YAML value of the wrong type used to reach the simulator as it was
    (a TypeError traceback, or a word taken as true)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind, flag = args[0], "--" + key.replace("_", "-")
    if value is None or key in _UNTYPED_SCENARIO_KEYS or kind not in (bool, int, float, str, Path):
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{flag} must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise ValueError(f"{flag} must be a single {'value' if kind in (str, Path) else 'number'}, got {value!r}")
    if kind in (str, Path):
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{flag} must be {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if kind is int:
        if not number.is_integer():
            raise ValueError(f"{flag} must be an integer, got {value!r}")
        return int(number)
    return number


def _resolve_bundle(value: Optional[str], gpu: Optional[str]) -> Optional[str]:
    """``--predictor-bundle``: None (roofline), a path, or auto (cached per GPU, fitted on first use)."""
    if value is None or value == "none":
        return None
    if value != "auto":
        if not Path(value).is_file():
            raise ValueError(f"--predictor-bundle {value!r} is not a file; give a bundle path, auto or none")
        return value
    from calibration.auto_bundle import ensure_bundle
    from simulator.engine_args import EngineArgs
    return str(ensure_bundle(gpu or EngineArgs().gpu, log=lambda m: typer.echo(m, err=True)))


EP_SIZE_HELP = ("SGLang's expert parallelism of an MoE model: its experts over this many of the TP group's ranks, "
                "each expert split over TP / ep-size (default 1: experts tensor-parallel).")
CG_HELP = ("CUDA-graph capture sizes in tokens, as vllm serve's list: 1,2,4,8 or '1 2 4 8'; sizes above "
           "--max-num-batched-tokens are dropped. Default: vLLM's list.")
HUMAN_INT_HELP = "Tokens; as vLLM: 8k = 8,000, 8K = 8,192."
LORA_HELP = ("As vllm serve's: LoRA adapters' GPU slots (--max-loras x --max-lora-rank, in the model dtype) come off "
             "the KV budget, CUDA graphs are captured with and without LoRA kernels, and a step with adapters pays "
             "their kernels (roofline); dense models, co-located.")
LM_ONLY_HELP = ("As vllm serve's (and SGLang's, for Qwen3-VL / Qwen3.5): a multimodal checkpoint (Qwen3-VL, Qwen3.5, "
                "Gemma 3, Kimi-K2.5) served without its vision encoder, whose weights are otherwise counted in the KV budget.")
MM_LIMIT_HELP = ("As vllm serve's, JSON: input items per prompt by modality, e.g. '{\"image\": 0, \"video\": 0}'; "
                 "0 for every modality of the vision tower (Kimi-K2.5's: vision_chunk) drops it, as "
                 "--language-model-only does; a request with more images than its image count is refused.")
MM_TP_HELP = ("As vllm serve's: weights (default) splits the vision tower's linear weights by TP, data keeps the "
              "whole tower on every rank.")
HYBRID_KV_HELP = ("As vllm serve's: a model's sliding-window layers keep their KV as full attention, one KV "
                  "group of every layer (no blocks freed outside the window; the pool's blocks span every layer).")
MAX_MODEL_LEN_HELP = ("Tokens (8k = 8,000, 8K = 8,192), or auto / -1 (vLLM 0.14+): the longest a request can be "
                      "with the KV cache the memory leaves, at most the model's (default: the model's).")
CC_HELP = ("vLLM --compilation-config JSON; only the CUDA-graph keys are simulated: cudagraph_mode "
           "(NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE = default), cudagraph_capture_sizes, "
           "max_cudagraph_capture_size.")
O_HELP = ("vLLM -O0..-O3 (default 2); only the cudagraph_mode it sets is simulated: 0 = NONE (eager), "
          "1 = PIECEWISE, 2 and 3 = FULL_AND_PIECEWISE. A --compilation-config cudagraph_mode wins.")
KV_DTYPE_HELP = ("KV-cache dtype, as vLLM: auto (default: the checkpoint's KV scheme, e.g. a modelopt FP8 KV "
                 "cache, else the model dtype; the model dtype before --vllm-version 0.14), bfloat16, float16, "
                 "fp8, fp8_e4m3, fp8_e5m2.")
QUANT_HELP = ("vLLM --quantization: fp8 = online FP8 of an unquantized checkpoint (per-tensor FP8 weights, "
              "dynamic activation scales; the KV cache keeps its dtype). A quantized checkpoint needs no flag.")
COMPILATION_KEYS = ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size")


def _int_list(value: Any, flag: str) -> Any:
    """A list flag's value: a YAML list as is, or "1,2,4" / "1 2 4" / "[1, 2, 4]" -> [1, 2, 4]."""
    if value is None or not isinstance(value, str):
        return value
    parts = [p for p in value.strip().strip("[]").replace(",", " ").split() if p]
    out = []
    for p in parts:
        try:
            out.append(int(p))
        except ValueError:
            raise ValueError(f"{flag} {value!r}: {p!r} is not an integer; give e.g. 1 2 4 8") from None
    return out


def _json_object(value: Any, flag: str) -> dict | None:
    """A JSON-object flag's value (JSON text, or a mapping from a scenario file) as a dict; None if unset."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{flag} {value!r} is not valid JSON: {exc.msg}") from None
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {value!r}")
    return value


def _apply_compilation_config(values: dict[str, Any]) -> None:
    """Move the CUDA-graph keys of ``compilation_config`` (JSON text or a mapping) into ``values``."""
    cc = _json_object(values.pop("compilation_config", None), "--compilation-config")
    if cc is None:
        return
    for key, value in cc.items():
        if key not in COMPILATION_KEYS:
            raise ValueError(f"--compilation-config key {key!r} is not simulated; "
                             f"supported keys: {', '.join(COMPILATION_KEYS)}")
        if key != "cudagraph_mode" and values.get(key) is not None:   # vLLM create_engine_config
            raise ValueError(f"{key} and compilation_config.{key} are mutually exclusive")
        values[key] = value


# vLLM 0.33's EPLBConfig fields (--eplb-config); only num_redundant_experts changes a simulation (the
# placement is the steady state, the rearrangement's timing and transfers are not modelled: simulator.eplb)
EPLB_KEYS = ("window_size", "step_interval", "num_redundant_experts", "log_balancedness",
             "log_balancedness_interval", "use_async", "policy", "communicator", "enable_migration_batching")


def _apply_eplb_config(values: dict[str, Any]) -> None:
    """Move ``eplb_config``'s num_redundant_experts (JSON text or a mapping) into ``values``."""
    cfg = _json_object(values.pop("eplb_config", None), "--eplb-config")
    if cfg is None:
        return
    for key in cfg:
        if key not in EPLB_KEYS:
            raise ValueError(f"--eplb-config key {key!r} is not one of vLLM's: {', '.join(EPLB_KEYS)}")
    n = cfg.get("num_redundant_experts", 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"--eplb-config num_redundant_experts must be an integer >= 0, got {n!r}")
    values["num_redundant_experts"] = n


def _float_list(value: Any, flag: str) -> list[float] | None:
    """A list-of-numbers flag: a YAML list or number as is, or "0.8,0.6" / "0.8 0.6" -> [0.8, 0.6]."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    parts = value if isinstance(value, list) else str(value).strip().strip("[]").replace(",", " ").split()
    try:
        return [float(p) for p in parts]
    except (TypeError, ValueError):
        raise ValueError(f"{flag} {value!r} is not a list of numbers; give e.g. 0.8,0.6,0.45") from None


def _apply_speculative_config(values: dict[str, Any]) -> None:
    """Turn ``speculative_config`` (JSON text or a mapping) and ``spec_acceptance_rate`` into the
    engine's ``SpecDecodeConfig`` (seeded with the workload's seed)."""
    from simulator.spec_decode import spec_config_from_vllm
    cfg = _json_object(values.pop("speculative_config", None), "--speculative-config")
    rates = _float_list(values.pop("spec_acceptance_rate", None), "--spec-acceptance-rate")
    if cfg is None:
        if rates is not None:
            raise ValueError("--spec-acceptance-rate needs --speculative-config")
        return
    values["speculative_config"] = spec_config_from_vllm(cfg, rates, int(values.get("seed") or 0))


def _token_count(value: Any, flag: str, auto: bool = False) -> int | None:
    """A token-count flag as vLLM parses it (``human_readable_int``: 32k = 32,000, 32K = 32,768;
    ``auto``: --max-model-len's auto / -1, kept as -1); None stays None."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if auto and (text == "-1" or text.lower() == "auto"):
        return -1
    from simulator.memory import parse_human_int
    try:
        return parse_human_int(text)
    except ValueError as exc:
        if "decimals" in str(exc):      # 3.5K: vLLM refuses a decimal with a binary suffix too
            raise ValueError(f"{flag} {exc}") from None
        raise ValueError(f"{flag} {value!r} is not a token count; use digits or a k/m/g (1000s) or K/M/G (1024s) "
                         f"suffix, e.g. 32k{', or auto' if auto else ''}") from None


def _apply_token_counts(values: dict[str, Any]) -> None:
    """--max-model-len and --max-num-batched-tokens parsed as vLLM parses them (``_token_count``)."""
    values["max_model_len"] = _token_count(values.get("max_model_len"), "--max-model-len", auto=True)
    values["max_num_batched_tokens"] = _token_count(values.get("max_num_batched_tokens"), "--max-num-batched-tokens")
    for key in ("max_num_queued_tokens", "prefill_max_num_batched_tokens", "decode_max_num_batched_tokens"):
        if key in values:    # human-readable ints in vLLM too (the roles' own --max-num-batched-tokens)
            values[key] = _token_count(values[key], "--" + key.replace("_", "-"))


def _pick(cls, values: dict[str, Any]):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _pdd_spec(values: dict[str, Any]):
    """The P/D part of the spec from the --prefill-*/--decode-*/--kv-transfer-* values; None if none given."""
    if all(values.get(k) is None for k in PDD_KEYS):
        return None
    from simulator.control_plane import DEFAULT_KV_TRANSFER_LATENCY_S, PddSpec, RoleLayout

    def layout(role: str):
        return RoleLayout(role, **{k: values.get(f"{role}_{k}") for k in ROLE_KEYS})

    bw = values.get("kv_transfer_bandwidth")
    lat = values.get("kv_transfer_latency_ms")
    return PddSpec(layout("prefill"), layout("decode"),
                   kv_transfer_bandwidth_bytes_per_s=None if bw is None else float(bw) * 1e9,
                   kv_transfer_latency_s=DEFAULT_KV_TRANSFER_LATENCY_S if lat is None else float(lat) / 1e3)


def _afd_spec(values: dict[str, Any]):
    """The A/F part of the spec from the --attention-*/--ffn-*/--afd-* values; None if none given."""
    if all(values.get(k) is None for k in AFD_KEYS):
        return None
    from simulator.afd import DEFAULT_AFD_LANES, AfdRole, AfdSpec
    bw = values.get("afd_link_bandwidth")
    lanes = values.get("afd_lanes")
    return AfdSpec(AfdRole("attention", **{k: values.get(f"attention_{k}") for k in ("tp", "dp", "replicas", "gpu")}),
                   AfdRole("ffn", **{k: values.get(f"ffn_{k}") for k in ("tp", "ep", "replicas", "gpu")}),
                   lanes=DEFAULT_AFD_LANES if lanes is None else lanes,
                   link_bandwidth_bytes_per_s=None if bw is None else float(bw) * 1e9)


def _afd_layout(result) -> str:
    """One line: P, A and F roles' GPUs and the per-role busy fractions."""
    s, (prefill, attention) = result.summary, result.roles
    f = result.ffn
    n_a, n_rep = attention.resolved.num_engines, len(attention.cluster.replicas)
    a_layout = (f"{n_rep} replica(s) of DP{n_a // n_rep} in lockstep x " if s.get("attention_lockstep")
                else f"{n_a} engine(s) of ")
    return (f"Simulated {result.resolved.model.name} attention/FFN disaggregated on {s['num_gpus']} GPUs in total: "
            f"prefill {prefill.num_gpus} x {prefill.resolved.gpu.name}; attention {a_layout}"
            f"TP{attention.resolved.parallel.tp} on {attention.num_gpus} x {attention.resolved.gpu.name}; "
            f"ffn {f.replicas} replica(s) of TP{f.tp} x EP{f.ep} on {f.num_gpus} x {f.gpu_name}; "
            f"{s['afd_lanes']} lane(s); busy A {s['attention_busy_fraction']:.1%} F {s['ffn_busy_fraction']:.1%}, "
            f"A<->F transfer {s['mean_afd_transfer_ms_per_step']:.3f} ms/step, EP wait "
            f"{s['mean_ep_wait_ms_per_step']:.3f} ms/step")


def _pdd_layout(result) -> str:
    """One line per deployment: each role's engines and GPUs, and the total."""
    parts = []
    for role in result.roles:
        r = role.resolved
        layout = (f"{r.args.num_replicas} replica(s) of DP{r.args.data_parallel_size} in lockstep x "
                  if r.lockstep_dp else f"{r.num_engines} engine(s) of ")
        parts.append(f"{role.layout.name} {layout}TP{r.parallel.tp} x PP{r.parallel.pp} "
                     f"on {r.num_gpus} x {r.gpu.name} (KV {role.memory.num_gpu_blocks} blocks x {r.block_size} tokens; "
                     f"steps of <= {r.max_num_seqs} requests / {r.max_num_batched_tokens} tokens)")
    total = sum(role.num_gpus for role in result.roles)
    s = result.summary
    return (f"Simulated {result.resolved.model.name} P/D disaggregated on {total} GPUs in total: "
            + "; ".join(parts) + f"; busy P {s['prefill_busy_fraction']:.1%} D {s['decode_busy_fraction']:.1%}, "
            f"mean batch P {s['prefill_mean_batch_size']:.1f} D {s['decode_mean_batch_size']:.1f} requests"
            f"; cost model: {s.get('cost_model', 'roofline')}")


@app.command()
def simulate(
    config: Optional[Path] = typer.Option(None, "--config", help="Scenario YAML with the same settings as the flags (flags win)."),
    model: Optional[str] = typer.Option(None, help="HF config.json path/folder or catalogue name, e.g. meta-llama/Llama-3.1-8B.", rich_help_panel=ENGINE_HELP),
    gpu: Optional[str] = typer.Option(None, help="GPU type, e.g. H100, H200, A100-80GB (see `frontier gpus`).", rich_help_panel=ENGINE_HELP),
    tensor_parallel_size: Optional[int] = typer.Option(None, "--tensor-parallel-size", "-tp", rich_help_panel=ENGINE_HELP),
    pipeline_parallel_size: Optional[int] = typer.Option(None, "--pipeline-parallel-size", "-pp", rich_help_panel=ENGINE_HELP),
    data_parallel_size: Optional[int] = typer.Option(None, "--data-parallel-size", "-dp", help="DP ranks; each runs its own scheduler and KV cache.", rich_help_panel=ENGINE_HELP),
    enable_expert_parallel: Optional[bool] = typer.Option(None, "--enable-expert-parallel/--no-enable-expert-parallel", rich_help_panel=ENGINE_HELP),
    enable_eplb: Optional[bool] = typer.Option(None, "--enable-eplb/--no-enable-eplb", help="vLLM's expert-parallel load balancer: experts placed by their load as its policy does (steady state), with --eplb-config's redundant replicas.", rich_help_panel=ENGINE_HELP),
    eplb_config: Optional[str] = typer.Option(None, "--eplb-config", help="vLLM --eplb-config JSON, e.g. '{\"num_redundant_experts\": 32}'; only num_redundant_experts is simulated.", rich_help_panel=ENGINE_HELP),
    num_replicas: Optional[int] = typer.Option(None, help="Independent engine replicas behind the router.", rich_help_panel=ENGINE_HELP),
    num_gpus: Optional[int] = typer.Option(None, "--num-gpus", help="Expected total GPUs of the deployment, all roles together; a layout that uses another number is refused before the run.", rich_help_panel=ENGINE_HELP),
    router: Optional[str] = typer.Option(None, help="round_robin (default) or least_loaded: picks one of --num-replicas servers; vLLM's DP load balancer picks the DP rank within it.", rich_help_panel=ENGINE_HELP),
    max_num_seqs: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    max_num_batched_tokens: Optional[str] = typer.Option(None, help=HUMAN_INT_HELP, rich_help_panel=ENGINE_HELP),
    max_model_len: Optional[str] = typer.Option(None, help=MAX_MODEL_LEN_HELP, rich_help_panel=ENGINE_HELP),
    block_size: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    gpu_memory_utilization: Optional[float] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    num_gpu_blocks_override: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    kv_cache_memory_bytes: Optional[str] = typer.Option(None, help="KV-cache bytes per GPU, as vLLM: 8G = 8 GiB, 8g = 8e9; ignores --gpu-memory-utilization.", rich_help_panel=ENGINE_HELP),
    kv_cache_dtype: Optional[str] = typer.Option(None, help=KV_DTYPE_HELP, rich_help_panel=ENGINE_HELP),
    mamba_cache_dtype: Optional[str] = typer.Option(None, help=MAMBA_DTYPE_HELP, rich_help_panel=ENGINE_HELP),
    mamba_ssm_cache_dtype: Optional[str] = typer.Option(None, help=MAMBA_SSM_DTYPE_HELP, rich_help_panel=ENGINE_HELP),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q", help=QUANT_HELP, rich_help_panel=ENGINE_HELP),
    enable_prefix_caching: Optional[bool] = typer.Option(None, "--enable-prefix-caching/--no-enable-prefix-caching", rich_help_panel=ENGINE_HELP),
    enable_chunked_prefill: Optional[bool] = typer.Option(None, "--enable-chunked-prefill/--no-enable-chunked-prefill", help="Off: a prompt is scheduled whole or waits, and the defaulted --max-num-batched-tokens is at least --max-model-len (vLLM's rule).", rich_help_panel=ENGINE_HELP),
    long_prefill_token_threshold: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    long_prefill_token_threshold_adaptive: Optional[bool] = typer.Option(None, "--long-prefill-token-threshold-adaptive/--no-long-prefill-token-threshold-adaptive", help="vLLM 0.31+: the threshold is at least --max-num-batched-tokens / (running + waiting requests).", rich_help_panel=ENGINE_HELP),
    max_num_active_seqs: Optional[int] = typer.Option(None, help="vLLM 0.31+: requests admitted into RUNNING at most (default --max-num-seqs, which still sizes the CUDA graphs).", rich_help_panel=ENGINE_HELP),
    scheduler_reserve_full_isl: Optional[bool] = typer.Option(None, "--scheduler-reserve-full-isl/--no-scheduler-reserve-full-isl", help="vLLM 0.19+ (default on): admit a request only when its whole prompt's KV blocks fit; off: its first chunk's.", rich_help_panel=ENGINE_HELP),
    prefill_schedule_interval: Optional[int] = typer.Option(None, help="vLLM 0.24+: admit and continue prefills only once every N steps while requests decode, unless the last release step could not admit everyone (default 1: every step).", rich_help_panel=ENGINE_HELP),
    max_num_queued_reqs: Optional[int] = typer.Option(None, help="vLLM 0.29+: the API server refuses a request (HTTP 503, a failed request) when its server holds this many unfinished ones.", rich_help_panel=ENGINE_HELP),
    max_num_queued_tokens: Optional[str] = typer.Option(None, help="vLLM 0.29+: the API server refuses a request (HTTP 503) while its requests still in prefill hold this many prompt tokens (8k = 8,000).", rich_help_panel=ENGINE_HELP),
    watermark: Optional[float] = typer.Option(None, help="vLLM 0.24+: fraction of the KV blocks kept free when admitting waiting or preempted requests (default 0).", rich_help_panel=ENGINE_HELP),
    enforce_eager: Optional[bool] = typer.Option(None, "--enforce-eager/--no-enforce-eager", rich_help_panel=ENGINE_HELP),
    disable_hybrid_kv_cache_manager: Optional[bool] = typer.Option(None, "--disable-hybrid-kv-cache-manager", help=HYBRID_KV_HELP, rich_help_panel=ENGINE_HELP),
    language_model_only: Optional[bool] = typer.Option(None, "--language-model-only", help=LM_ONLY_HELP, rich_help_panel=ENGINE_HELP),
    limit_mm_per_prompt: Optional[str] = typer.Option(None, "--limit-mm-per-prompt", help=MM_LIMIT_HELP, rich_help_panel=ENGINE_HELP),
    mm_encoder_tp_mode: Optional[str] = typer.Option(None, "--mm-encoder-tp-mode", help=MM_TP_HELP, rich_help_panel=ENGINE_HELP),
    mm_processor_kwargs: Optional[str] = typer.Option(None, "--mm-processor-kwargs", help="As vllm serve's, JSON: the image processor's settings; Qwen's min_pixels / max_pixels are simulated, e.g. '{\"max_pixels\": 1003520}' (an image's tokens, the encoder budget).", rich_help_panel=ENGINE_HELP),
    disable_chunked_mm_input: Optional[bool] = typer.Option(None, "--disable-chunked-mm-input", help="A prefill chunk never covers part of an image: it stops before the image instead (needs --max-num-batched-tokens >= the largest image's tokens).", rich_help_panel=ENGINE_HELP),
    cudagraph_capture_sizes: Optional[str] = typer.Option(None, "--cudagraph-capture-sizes", help=CG_HELP, rich_help_panel=ENGINE_HELP),
    max_cudagraph_capture_size: Optional[int] = typer.Option(None, "--max-cudagraph-capture-size", help="Largest CUDA-graph capture size in tokens (default: vLLM's, 512 or 1024 on B200/B300).", rich_help_panel=ENGINE_HELP),
    compilation_config: Optional[str] = typer.Option(None, "--compilation-config", "-cc", help=CC_HELP, rich_help_panel=ENGINE_HELP),
    optimization_level: Optional[int] = typer.Option(None, "--optimization-level", "-O", help=O_HELP, rich_help_panel=ENGINE_HELP),
    async_scheduling: Optional[bool] = typer.Option(None, "--async-scheduling/--no-async-scheduling", rich_help_panel=ENGINE_HELP),
    scheduling_policy: Optional[str] = typer.Option(None, help="fcfs (default) or priority.", rich_help_panel=ENGINE_HELP),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="vLLM release to reproduce where its model kernels, KV budget, engine defaults (async scheduling: off before 0.14) and DP load balancer differ from 0.33's, e.g. 0.19.0 (default 0.33.0; simulator/vllm_version.py lists what changed); the scheduler follows 0.33 whatever this says.", rich_help_panel=ENGINE_HELP),
    dataset_name: Optional[str] = typer.Option(None, help="random (default), sharegpt, trace, prefix_repetition (vllm bench serve's shared-prefix dataset), reasoning (multi-round agentic sessions: --num-prompts sessions), session_trace (sessions from --dataset-path) or random-mm (random text, then images: Qwen3-VL, Qwen3.5 and Gemma 3 towers).", rich_help_panel=BENCH_HELP),
    dataset_path: Optional[str] = typer.Option(None, help="Trace file (.jsonl/.csv/.parquet) or a ShareGPT JSON.", rich_help_panel=BENCH_HELP),
    num_prompts: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    request_rate: Optional[float] = typer.Option(None, help="Requests per second; inf (default) sends all at t=0.", rich_help_panel=BENCH_HELP),
    burstiness: Optional[float] = typer.Option(None, rich_help_panel=BENCH_HELP),
    max_concurrency: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    ramp_up_strategy: Optional[str] = typer.Option(None, "--ramp-up-strategy", help="As vllm bench serve's: linear or exponential, the request rate rising from --ramp-up-start-rps to --ramp-up-end-rps over the run (instead of --request-rate).", rich_help_panel=BENCH_HELP),
    ramp_up_start_rps: Optional[int] = typer.Option(None, "--ramp-up-start-rps", rich_help_panel=BENCH_HELP),
    ramp_up_end_rps: Optional[int] = typer.Option(None, "--ramp-up-end-rps", rich_help_panel=BENCH_HELP),
    goodput: Optional[str] = typer.Option(None, "--goodput", help="As vllm bench serve's: SLOs as KEY:VALUE pairs in ms (ttft, tpot, e2el), e.g. 'ttft:500 tpot:50'; prints the request goodput.", rich_help_panel=OUT_HELP),
    percentile_metrics: Optional[str] = typer.Option(None, "--percentile-metrics", help="Metrics whose percentiles are reported, comma-separated (default ttft,tpot,itl,e2el).", rich_help_panel=OUT_HELP),
    metric_percentiles: Optional[str] = typer.Option(None, "--metric-percentiles", help="Percentiles reported, comma-separated, e.g. 50,90,99 (default 99).", rich_help_panel=OUT_HELP),
    seed: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_input_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_output_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_range_ratio: Optional[float] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_prefix_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    sharegpt_output_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    prefix_repetition_prefix_len: Optional[int] = typer.Option(None, help="prefix_repetition: tokens of each shared prefix (default 256).", rich_help_panel=BENCH_HELP),
    prefix_repetition_suffix_len: Optional[int] = typer.Option(None, help="prefix_repetition: tokens of each request's own suffix (default 256).", rich_help_panel=BENCH_HELP),
    prefix_repetition_num_prefixes: Optional[int] = typer.Option(None, help="prefix_repetition: shared prefixes (default 10); --num-prompts // this many requests each.", rich_help_panel=BENCH_HELP),
    prefix_repetition_output_len: Optional[int] = typer.Option(None, help="prefix_repetition: output tokens of every request (default 128).", rich_help_panel=BENCH_HELP),
    reasoning_rounds: Optional[float] = typer.Option(None, help="reasoning: mean rounds per session (geometric, long-tailed; default 4).", rich_help_panel=BENCH_HELP),
    reasoning_max_rounds: Optional[int] = typer.Option(None, help="reasoning: most rounds of a session (default 16).", rich_help_panel=BENCH_HELP),
    reasoning_first_input_len: Optional[int] = typer.Option(None, help="reasoning: the first round's prompt tokens (default 4096).", rich_help_panel=BENCH_HELP),
    reasoning_round_input_len: Optional[int] = typer.Option(None, help="reasoning: new tokens of each later round, a tool's observation (default 1024).", rich_help_panel=BENCH_HELP),
    reasoning_round_output_len: Optional[int] = typer.Option(None, help="reasoning: output tokens of each hidden planning round (default 200).", rich_help_panel=BENCH_HELP),
    reasoning_answer_len: Optional[int] = typer.Option(None, help="reasoning: output tokens of the final, user-facing round (default 500).", rich_help_panel=BENCH_HELP),
    reasoning_tool_latency_ms: Optional[float] = typer.Option(None, help="reasoning: tool latency between rounds, ms (default 500).", rich_help_panel=BENCH_HELP),
    disable_shuffle: Optional[bool] = typer.Option(None, "--disable-shuffle", help="prefix_repetition: keep the requests in generation order (prefix by prefix).", rich_help_panel=BENCH_HELP),
    random_mm_base_items_per_request: Optional[int] = typer.Option(None, "--random-mm-base-items-per-request", help="random-mm: mean images per request (default 1).", rich_help_panel=BENCH_HELP),
    random_mm_num_mm_items_range_ratio: Optional[float] = typer.Option(None, "--random-mm-num-mm-items-range-ratio", help="random-mm: images per request uniform in [floor(n(1-r)), ceil(n(1+r))] (default 0).", rich_help_panel=BENCH_HELP),
    random_mm_limit_mm_per_prompt: Optional[str] = typer.Option(None, "--random-mm-limit-mm-per-prompt", help="random-mm: JSON of items per request at most, e.g. '{\"image\": 3, \"video\": 0}' (default image 255, video 1).", rich_help_panel=BENCH_HELP),
    random_mm_bucket_config: Optional[str] = typer.Option(None, "--random-mm-bucket-config", help="random-mm: image sizes and their probabilities, (height, width, 1): p, e.g. '{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}' (the default; video buckets are not simulated).", rich_help_panel=BENCH_HELP),
    output_dir: Optional[Path] = typer.Option(None, help="Write requests.parquet, steps.parquet and summary.json here.", rich_help_panel=OUT_HELP),
    batch_trace: Optional[Path] = typer.Option(None, help="Parquet: one row per scheduled request per step.", rich_help_panel=OUT_HELP),
    perfetto: Optional[Path] = typer.Option(None, help="Chrome trace-event JSON of every step (and P/D KV transfers) for ui.perfetto.dev.", rich_help_panel=OUT_HELP),
    save_result: Optional[bool] = typer.Option(None, "--save-result/--no-save-result", help="Write the vllm bench serve result JSON.", rich_help_panel=OUT_HELP),
    save_detailed: Optional[bool] = typer.Option(None, "--save-detailed/--no-save-detailed", help="Keep the per-request arrays (input_lens, output_lens, start_times, ttfts, itls, errors) in the result JSON and summary.json, as vLLM's flag; requests.parquet has them either way.", rich_help_panel=OUT_HELP),
    result_dir: Optional[Path] = typer.Option(None, rich_help_panel=OUT_HELP),
    result_filename: Optional[str] = typer.Option(None, rich_help_panel=OUT_HELP),
    debug: Optional[bool] = typer.Option(None, "--debug/--no-debug", help="Check scheduler and KV invariants on every step.", rich_help_panel=OUT_HELP),
    step_jitter: Optional[float] = typer.Option(None, help="Relative std-dev of seeded per-step time noise (default 0).", rich_help_panel=ENGINE_HELP),
    predictor_bundle: Optional[str] = typer.Option(None, help="Calibrated operator costs: a bundle path, or auto (the cached bundle for --gpu, fitted from measured vLLM tables on first use). Default: roofline.", rich_help_panel=ENGINE_HELP),
    comm_model: Optional[str] = typer.Option(None, help="analytical (default: ring/tree, hierarchical across nodes) or calibrated (measured AIConfigurator tables, imported once into ~/.cache/frontier/profiles).", rich_help_panel=ENGINE_HELP),
    all2all_backend: Optional[str] = typer.Option(None, help="How MoE tokens reach their experts with DP x EP, as vLLM's --all2all-backend: allgather_reducescatter (default: all_gather + reduce_scatter over TP x DP), deepep_high_throughput, deepep_low_latency, ... (a dispatch + combine of the routed tokens over the EP group, priced as two all_to_all).", rich_help_panel=ENGINE_HELP),
    performance_mode: Optional[str] = typer.Option(None, "--performance-mode", help="vLLM's --performance-mode (0.17+): balanced (default), throughput (doubles the defaulted --max-num-batched-tokens and --max-num-seqs) or interactivity (CUDA graphs at every size 1..32).", rich_help_panel=ENGINE_HELP),
    speculative_config: Optional[str] = typer.Option(None, "--speculative-config", help="vLLM --speculative-config JSON, e.g. '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}' or a draft model '{\"model\": \"Qwen/Qwen3-0.6B\", \"num_speculative_tokens\": 4}'; methods eagle, eagle3, mtp, draft_model (co-located or pdd; EAGLE family with PP under async scheduling); needs --spec-acceptance-rate, or vLLM's synthetic acceptance in the config (rejection_sample_method synthetic with synthetic_acceptance_rates or synthetic_acceptance_length).", rich_help_panel=ENGINE_HELP),
    spec_acceptance_rate: Optional[str] = typer.Option(None, "--spec-acceptance-rate", help="Not a vLLM flag: the drafts' per-position acceptance rates as vLLM logs them ('Per-position acceptance rate'), e.g. 0.8,0.6,0.45, or one rate p for p, p^2, ...", rich_help_panel=ENGINE_HELP),
    stream_interval: Optional[int] = typer.Option(None, "--stream-interval", help="As vllm serve's: the API server streams a request's tokens in chunks of this many (its first and last at once); ITL is per chunk (default 1).", rich_help_panel=ENGINE_HELP),
    enable_lora: Optional[bool] = typer.Option(None, "--enable-lora/--no-enable-lora", help=LORA_HELP, rich_help_panel=ENGINE_HELP),
    max_loras: Optional[int] = typer.Option(None, "--max-loras", help="LoRA adapters in a batch at most (default 1); a waiting request of another adapter waits.", rich_help_panel=ENGINE_HELP),
    max_lora_rank: Optional[int] = typer.Option(None, "--max-lora-rank", help="Rank of the adapters' GPU slots (default 16; 1, 8, 16, 32, 64, 128, 256, 320 or 512).", rich_help_panel=ENGINE_HELP),
    max_cpu_loras: Optional[int] = typer.Option(None, "--max-cpu-loras", help="Adapters in the CPU cache (>= --max-loras; accepted, loading adapters is not priced).", rich_help_panel=ENGINE_HELP),
    lora_modules: Optional[str] = typer.Option(None, "--lora-modules", help="As vllm bench serve's: adapter names the requests run (comma- or space-separated), e.g. sql-lora,chat-lora; needs --enable-lora.", rich_help_panel=BENCH_HELP),
    lora_assignment: Optional[str] = typer.Option(None, "--lora-assignment", help="As vllm bench serve's: random (default: each request draws an adapter, seeded by --seed) or round-robin.", rich_help_panel=BENCH_HELP),
    moe_routing: Optional[str] = typer.Option(None, help="MoE token routing: balanced (default), random (each token's top-k experts drawn uniformly), power_law:ALPHA (AIConfigurator's skewed sampler as we reconstruct it; power_law:1.01 is its default assumption) or trace:PATH (one weight per expert); seeded by --seed.", rich_help_panel=ENGINE_HELP),
    engine_cpu_overhead: Optional[bool] = typer.Option(None, "--engine-cpu-overhead/--no-engine-cpu-overhead", help="Price the engine core's CPU time per step (0.81 ms + 0.042 ms per scheduled request, measured; simulator/engine_cpu.py): on the critical path with --no-async-scheduling, overlapped with the previous forward otherwise (default off).", rich_help_panel=ENGINE_HELP),
    frontend_latency_ms: Optional[float] = typer.Option(None, "--frontend-latency-ms", help="Milliseconds from a send to the request reaching the engines (HTTP, API server input processing, IPC); TTFT counts it (default 1).", rich_help_panel=ENGINE_HELP),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm (default) or sglang: the serving engine whose scheduler, memory sizing and CUDA graphs are simulated (SGLang 0.5.23, co-located TP servers, configured by its own flags below).", rich_help_panel=ENGINE_HELP),
    chunked_prefill_size: Optional[int] = typer.Option(None, "--chunked-prefill-size", help="Tokens of one extend batch (default by GPU memory: 8192 on H100/H200, 16384 from 160 GiB; -1: no chunking).", rich_help_panel=SGLANG_HELP),
    max_prefill_tokens: Optional[int] = typer.Option(None, "--max-prefill-tokens", help="Prompt tokens of one extend batch (default 16384).", rich_help_panel=SGLANG_HELP),
    max_running_requests: Optional[int] = typer.Option(None, "--max-running-requests", help="Request rows (default: from the token pool and --context-length, 2048-4096).", rich_help_panel=SGLANG_HELP),
    max_total_tokens: Optional[int] = typer.Option(None, "--max-total-tokens", help="Cap on the KV token pool (default: what --mem-fraction-static leaves).", rich_help_panel=SGLANG_HELP),
    mem_fraction_static: Optional[float] = typer.Option(None, "--mem-fraction-static", help="Share of the GPU memory free at start for weights + KV pool (default: SGLang's formula, 0.830 on H100).", rich_help_panel=SGLANG_HELP),
    context_length: Optional[int] = typer.Option(None, "--context-length", help="Longest request (default: the model's max_position_embeddings).", rich_help_panel=SGLANG_HELP),
    schedule_policy: Optional[str] = typer.Option(None, "--schedule-policy", help="fcfs (default), lof (longest output first) or lpm (longest prefix hit first; fcfs above 128 waiting requests).", rich_help_panel=SGLANG_HELP),
    schedule_conservativeness: Optional[float] = typer.Option(None, "--schedule-conservativeness", help="Scales the initial new_token_ratio 0.7 (default 1.0).", rich_help_panel=SGLANG_HELP),
    enable_mixed_chunk: Optional[bool] = typer.Option(None, "--enable-mixed-chunk/--no-enable-mixed-chunk", help="Run the running decodes inside extend batches (default off: prefill first, decodes wait).", rich_help_panel=SGLANG_HELP),
    disable_radix_cache: Optional[bool] = typer.Option(None, "--disable-radix-cache/--no-disable-radix-cache", help="No prefix sharing (default: the radix cache, in pages of --page-size, LRU).", rich_help_panel=SGLANG_HELP),
    disable_overlap_schedule: Optional[bool] = typer.Option(None, "--disable-overlap-schedule/--no-disable-overlap-schedule", help="SGLang's normal loop instead of the overlap scheduler (default: overlap).", rich_help_panel=SGLANG_HELP),
    disable_cuda_graph: Optional[bool] = typer.Option(None, "--disable-cuda-graph/--no-disable-cuda-graph", help="Every step eager (default: FULL decode graphs up to --cuda-graph-max-bs, breakable prefill graphs).", rich_help_panel=SGLANG_HELP),
    cuda_graph_bs: Optional[str] = typer.Option(None, "--cuda-graph-bs", help="Decode batch sizes to capture, comma-separated (default: SGLang's grid up to --cuda-graph-max-bs).", rich_help_panel=SGLANG_HELP),
    cuda_graph_max_bs: Optional[int] = typer.Option(None, "--cuda-graph-max-bs", help="Largest decode graph (default by GPU memory and TP: 256 on H100/H200 below TP4, 512 from TP4).", rich_help_panel=SGLANG_HELP),
    page_size: Optional[int] = typer.Option(None, "--page-size", help="KV page size in tokens (default: the default attention backend's, 64 on B200/GB200/B300 for models without MLA, else 1).", rich_help_panel=SGLANG_HELP),
    ep_size: Optional[int] = typer.Option(None, "--ep-size", "--expert-parallel-size", "--ep", help=EP_SIZE_HELP, rich_help_panel=SGLANG_HELP),
    disable_ignore_eos: Optional[bool] = typer.Option(None, "--disable-ignore-eos/--no-disable-ignore-eos", help="As sglang.bench_serving's flag: send requests without ignore_eos, so SGLang reserves the running requests' remaining tokens at its new_token_ratio (default: ignore_eos, bench_serving's; outputs still end at their lengths).", rich_help_panel=SGLANG_HELP),
    architecture: Optional[str] = typer.Option(None, help="colocated (default), pdd (prefill/decode disaggregated, NixlConnector) or afd (attention/FFN disaggregated decode).", rich_help_panel=PDD_HELP),
    prefill_tp: Optional[int] = typer.Option(None, help="Prefill role TP (default: --tensor-parallel-size).", rich_help_panel=PDD_HELP),
    prefill_pp: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    prefill_dp: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    prefill_replicas: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    prefill_gpu: Optional[str] = typer.Option(None, help="Prefill role GPU type (default: --gpu).", rich_help_panel=PDD_HELP),
    prefill_router: Optional[str] = typer.Option(None, help="round_robin or least_loaded (default: --router).", rich_help_panel=PDD_HELP),
    prefill_max_num_seqs: Optional[int] = typer.Option(None, help="The prefill instances' --max-num-seqs (default: --max-num-seqs).", rich_help_panel=PDD_HELP),
    prefill_max_num_batched_tokens: Optional[str] = typer.Option(None, help="The prefill instances' --max-num-batched-tokens (default: --max-num-batched-tokens; 8k = 8,000).", rich_help_panel=PDD_HELP),
    decode_tp: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    decode_pp: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    decode_dp: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    decode_replicas: Optional[int] = typer.Option(None, rich_help_panel=PDD_HELP),
    decode_gpu: Optional[str] = typer.Option(None, rich_help_panel=PDD_HELP),
    decode_router: Optional[str] = typer.Option(None, help="round_robin, least_loaded or kv_aware (most free KV blocks).", rich_help_panel=PDD_HELP),
    decode_max_num_seqs: Optional[int] = typer.Option(None, help="The decode instances' --max-num-seqs (default: --max-num-seqs).", rich_help_panel=PDD_HELP),
    decode_max_num_batched_tokens: Optional[str] = typer.Option(None, help="The decode instances' --max-num-batched-tokens (default: --max-num-batched-tokens; 8k = 8,000).", rich_help_panel=PDD_HELP),
    kv_transfer_bandwidth: Optional[float] = typer.Option(None, help="GB/s per GPU for every P->D KV transfer (default: NVLink within a node, else the NIC).", rich_help_panel=PDD_HELP),
    kv_transfer_latency_ms: Optional[float] = typer.Option(None, help="Latency floor per KV transfer (default 0.1 ms).", rich_help_panel=PDD_HELP),
    attention_tp: Optional[int] = typer.Option(None, help="Attention role TP (default: --tensor-parallel-size).", rich_help_panel=AFD_HELP),
    attention_dp: Optional[int] = typer.Option(None, help="Attention engines per attention replica (their tokens meet on one FFN replica).", rich_help_panel=AFD_HELP),
    attention_replicas: Optional[int] = typer.Option(None, help="Attention replicas (default: --num-replicas), one FFN replica each.", rich_help_panel=AFD_HELP),
    attention_gpu: Optional[str] = typer.Option(None, help="Attention role GPU type (default: --gpu).", rich_help_panel=AFD_HELP),
    ffn_tp: Optional[int] = typer.Option(None, help="FFN role tensor parallel per EP rank (default 1).", rich_help_panel=AFD_HELP),
    ffn_ep: Optional[int] = typer.Option(None, help="FFN role expert parallel (default 1).", rich_help_panel=AFD_HELP),
    ffn_replicas: Optional[int] = typer.Option(None, help="FFN replicas (default and required: = attention replicas).", rich_help_panel=AFD_HELP),
    ffn_gpu: Optional[str] = typer.Option(None, help="FFN role GPU type (default: the attention GPU).", rich_help_panel=AFD_HELP),
    afd_lanes: Optional[int] = typer.Option(None, help="Micro-batches per attention step that ping-pong between A and F (default 2).", rich_help_panel=AFD_HELP),
    afd_link_bandwidth: Optional[float] = typer.Option(None, help="GB/s per GPU of the A<->F activation link (default: NVLink within a node, else the NIC).", rich_help_panel=AFD_HELP),
) -> None:
    """Simulate a vLLM (or SGLang) deployment serving a benchmark workload and print vllm bench serve's summary."""
    from simulator.output import check_output_paths, write_outputs
    from simulator.simulation import run_simulation
    from simulator.metrics import format_summary

    cli = dict(locals())
    cli.pop("config")
    valid = _simulate_keys()
    try:
        values = _merge({k: cli[k] for k in valid if k in cli}, config, valid, typing.get_type_hints(simulate))
        spec = _simulation_spec(values)
        check_output_paths(values)
        result = run_simulation(spec)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    r = result.resolved
    setup = (f"comm {spec.comm_model}, MoE routing {spec.moe_routing}"
             + (", engine CPU per step" if spec.engine_cpu_overhead else ""))
    if result.sglang is not None:
        typer.echo(_sglang_layout(result) + f", {setup}")
    elif result.summary.get("architecture") == "afd":
        typer.echo(_afd_layout(result) + f", {setup}")
    elif result.roles:
        typer.echo(_pdd_layout(result) + f", {setup}")
    else:
        layout = (f"{r.args.num_replicas} replica(s) of DP{r.args.data_parallel_size} in lockstep x "
                  if r.lockstep_dp else f"{r.num_engines} engine(s) of ")
        typer.echo(f"Simulated {r.model.name} on {r.num_gpus} x {r.gpu.name} "
                   f"({layout}TP{r.parallel.tp} x PP{r.parallel.pp}); "
                   f"KV cache {result.memory.num_gpu_blocks} blocks x {r.block_size} tokens per engine; "
                   f"busy {result.summary['colocated_busy_fraction']:.1%}, mean batch "
                   f"{result.summary['colocated_mean_batch_size']:.1f} requests; "
                   f"cost model: {result.summary.get('cost_model', 'roofline')}, {setup}")
    if "lora_gpu_loads" in result.summary:
        s = result.summary
        typer.echo(f"LoRA: {s['lora_gpu_loads']} adapter copies into GPU slots ({s['lora_adapter_copy_ms']:.2f} ms "
                   f"each), {s['lora_disk_loads']} reads from disk (not priced)")
    if "cost_queries_predicted" in result.summary:
        typer.echo(_calibrated_queries(result.summary))
    if "comm_queries" in result.summary:
        typer.echo(_calibrated_comm(result.summary))
    for note in result.summary.get("pricing_notes", ()):
        typer.echo(f"note: {note}")
    if "spec_num_drafts" in result.summary:
        typer.echo(_spec_decoding(result.summary, r.args.speculative_config))
    if "prefix_cache_queries" in result.summary:
        s = result.summary
        scope = f" ({s['prefix_cache_scope']})" if "prefix_cache_scope" in s else ""
        typer.echo(f"prefix cache{scope}: hit rate {100 * s['prefix_cache_hit_rate']:.1f} % ({s['prefix_cache_hits']:,} of "
                   f"{s['prefix_cache_queries']:,} prompt tokens looked up, vLLM's prefix_cache_hits / queries)")
    if "mm_images" in result.summary:
        s = result.summary
        typer.echo(f"images: {s['mm_images']:,} in the requests, {s['mm_items_encoded']:,} encoded by the vision tower "
                   f"({s['mm_encoder_cache_evictions']:,} encoder-cache evictions)")
    if "sessions_completed" in result.summary:
        s = result.summary
        typer.echo(f"sessions: {s['sessions_completed']} completed, {s['sessions_failed']} failed, "
                   f"{s['mean_rounds_per_session']:.2f} rounds each; answer-visible TTFT (arrival to the final "
                   f"round's first token) mean {s['mean_attft_ms']:.2f} / median {s['median_attft_ms']:.2f} / p99 "
                   f"{s['p99_attft_ms']:.2f} ms; session E2EL mean {s['mean_session_e2el_ms']:.2f} ms; hidden planning "
                   f"{s['hidden_planning_tokens']:,} tokens, {s['hidden_planning_throughput']:.1f} tok/s")
    if result.failed:
        first = next(iter(result.failed.items()))
        typer.echo(f"warning: {len(result.failed)} request(s) failed, e.g. {first[0]}: {first[1]}", err=True)
    if spec.workload.ramp_up_strategy is not None:
        w = spec.workload
        typer.echo(f"Traffic ramp-up strategy: {w.ramp_up_strategy}. Will increase RPS from {w.ramp_up_start_rps} to "
                   f"{w.ramp_up_end_rps} RPS over the duration of the benchmark.")
    if result.summary.get("completed"):
        typer.echo(format_summary(result.summary))
    typer.echo(f"{'Simulated duration (s):':<40} {result.simulated_duration_s:<10.2f}")
    typer.echo(f"{'Simulation wall time (s):':<40} {result.sim_wall_s:<10.3f}")
    try:
        written = write_outputs(result, values)
    except OSError as exc:       # what check_output_paths cannot foresee (a full disk, /proc)
        _fail(f"could not write {exc.filename or 'an output file'}: {exc.strerror or exc}")
        return
    for path in written:
        typer.echo(f"wrote {path}")


# simulate's keys beyond EngineArgs' and WorkloadSpec's fields
OUT_KEYS = ("output_dir", "batch_trace", "perfetto", "save_result", "result_dir", "result_filename", "debug",
            "max_concurrency", "num_gpus", "save_detailed", "step_jitter", "comm_model", "moe_routing", "architecture",
            "engine_cpu_overhead", "frontend_latency_ms", "goodput", "percentile_metrics", "metric_percentiles",
            "predictor_bundle", "compilation_config", "eplb_config", "spec_acceptance_rate") + PDD_KEYS + AFD_KEYS


def _simulate_keys() -> tuple[str, ...]:
    """Every key ``frontier simulate`` takes (a flag's name with underscores; a scenario file's key)."""
    from simulator.engine_args import EngineArgs
    from simulator.sglang_layout import SglangArgs
    from simulator.workload import WorkloadSpec
    return (EngineArgs.field_names() + tuple(f.name for f in fields(WorkloadSpec)) + OUT_KEYS + ("engine",)
            + SglangArgs.field_names())


def _sglang_args(values: dict[str, Any]):
    """``SglangArgs`` of --engine sglang's values (None for vLLM); ValueError (one line) for a flag
    of the other engine."""
    from simulator.engine_args import EngineArgs
    from simulator.sglang_layout import SglangArgs
    engine = str(values.get("engine", "vllm"))
    if engine not in ENGINES:
        raise ValueError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    vllm_keys = EngineArgs.field_names() + ("compilation_config", "eplb_config", "spec_acceptance_rate")
    foreign = _foreign_flag(engine, [k for k in vllm_keys if values.get(k) is not None and k not in SGLANG_SHARED_KEYS],
                            [k for k in SglangArgs.field_names() if values.get(k) is not None])
    if foreign:
        raise ValueError(foreign)
    return _pick(SglangArgs, values) if engine == "sglang" else None


def _foreign_flag(engine: str, vllm_given: list[str], sglang_given: list[str]) -> str | None:
    """The one-line refusal of the first flag given that belongs to the other engine (SGLang's own
    flag for the same setting named where it has one), or None."""
    if engine == "sglang" and vllm_given:
        key = vllm_given[0]
        hint = VLLM_TO_SGLANG.get(key)
        return (f"--{key.replace('_', '-')} is a vLLM flag, not simulated with --engine sglang"
                + (f"; SGLang's is {hint}" if hint else ""))
    if engine == "vllm" and sglang_given:
        return f"--{sglang_given[0].replace('_', '-')} is an SGLang flag; add --engine sglang"
    return None


def _simulation_spec(values: dict[str, Any]):
    """The ``SimulationSpec`` of simulate's merged ``values`` (flags and scenario keys; JSON texts
    and token counts parsed here, the parsed keys replaced in ``values``). ValueError (one line)
    for bad input."""
    from simulator.engine_args import EngineArgs
    from simulator.simulation import FRONTEND_LATENCY_S, SimulationSpec
    from simulator.workload import WorkloadSpec
    bs = _int_list(values.get("cuda_graph_bs"), "--cuda-graph-bs")
    values["cuda_graph_bs"] = None if bs is None else tuple(bs)
    sglang = _sglang_args(values)
    values["cudagraph_capture_sizes"] = _int_list(values.get("cudagraph_capture_sizes"), "--cudagraph-capture-sizes")
    _apply_compilation_config(values)
    _apply_eplb_config(values)
    _apply_speculative_config(values)
    _apply_token_counts(values)
    if isinstance(values.get("lora_modules"), str):         # a flag's text; a scenario file may give a list
        values["lora_modules"] = tuple(n for n in values["lora_modules"].replace(",", " ").split())
    if values.get("kv_cache_memory_bytes") is not None:
        from simulator.memory import parse_human_int
        values["kv_cache_memory_bytes"] = parse_human_int(values["kv_cache_memory_bytes"])
    return SimulationSpec(
        engine=_pick(EngineArgs, values), workload=_pick(WorkloadSpec, values),
        max_concurrency=values.get("max_concurrency"),
        num_gpus=values.get("num_gpus"),
        save_detailed=bool(values.get("save_detailed", False)),
        keep_batch_trace=values.get("batch_trace") is not None,
        debug=bool(values.get("debug", False)),
        step_jitter=float(values.get("step_jitter", 0.0)),
        comm_model=str(values.get("comm_model", "analytical")),
        moe_routing=str(values.get("moe_routing", "balanced")),
        engine_cpu_overhead=bool(values.get("engine_cpu_overhead", False)),
        frontend_latency_s=(FRONTEND_LATENCY_S if values.get("frontend_latency_ms") is None
                            else float(values["frontend_latency_ms"]) * 1e-3),
        architecture=str(values.get("architecture", "colocated")), pdd=_pdd_spec(values),
        afd=_afd_spec(values), sglang=sglang,
        predictor_bundle=_resolve_bundle(values.get("predictor_bundle"), values.get("gpu")),
        **_reporting(values))


def _reporting(values: dict[str, Any]) -> dict[str, Any]:
    """``SimulationSpec``'s goodput and percentile settings from vllm bench serve's flags (text as
    vLLM takes it; a scenario file may give lists / a mapping); ValueError (one line) for bad text."""
    out: dict[str, Any] = {}
    goodput = values.get("goodput")
    if goodput is not None:
        pairs = goodput.items() if isinstance(goodput, dict) else [
            p.split(":") for p in (goodput.replace(",", " ").split() if isinstance(goodput, str) else goodput)]
        try:
            out["goodput"] = tuple((str(k), float(v)) for k, v in pairs)
        except (TypeError, ValueError):
            raise ValueError(f"--goodput {goodput!r}: give KEY:VALUE pairs, the key a metric (ttft, tpot, e2el), "
                             "the value in ms, e.g. 'ttft:500 tpot:50'") from None
    for key, kind in (("percentile_metrics", str), ("metric_percentiles", float)):
        raw = values.get(key)
        if raw is None:
            continue
        items = raw.split(",") if isinstance(raw, str) else raw
        try:
            out[key] = tuple(kind(str(x).strip()) for x in items)
        except ValueError:
            raise ValueError(f"--{key.replace('_', '-')} {raw!r} is not a comma-separated list of "
                             f"{'metric names' if kind is str else 'numbers'}") from None
    return out


def _sglang_layout(result) -> str:
    """The deployment line of an SGLang run: its servers and what they started with."""
    r, lay, s = result.resolved, result.sglang, result.summary
    c = lay.config
    g = lay.graphs
    graphs = ("no CUDA graphs" if g.enforce_eager else "CUDA graphs: " + ", ".join(
        part for part in (g.decode_sizes and f"decode <= {g.decode_sizes[-1]} requests",
                          g.prefill_sizes and f"prefill <= {g.prefill_sizes[-1]} tokens") if part))
    chunk = "no chunking" if c.chunked_prefill_size == -1 else f"chunked_prefill_size {c.chunked_prefill_size}"
    dp = r.args.data_parallel_size
    return (f"Simulated {r.model.name} on {s['num_gpus']} x {r.gpu.name} with SGLang 0.5.23 ({r.args.num_replicas} "
            f"server(s) of {f'DP{dp} x ' if dp > 1 else ''}TP{r.parallel.tp}"
            f"{f' (MoE EP{r.parallel.ep} x TP{r.parallel.moe_tp})' if r.parallel.ep > 1 else ''}); token pool {c.max_total_tokens} tokens (mem_fraction_static "
            f"{lay.mem_fraction_static}, page size {c.page_size}), max_running_requests {c.max_running_requests}, "
            f"{chunk}, {graphs}, "
            f"{'overlap' if not c.disable_overlap_schedule else 'normal'} scheduler; busy "
            f"{s['colocated_busy_fraction']:.1%}, mean batch {s['colocated_mean_batch_size']:.1f} requests, "
            f"{s['sglang_num_retractions']} retraction(s); cost model: {s.get('cost_model', 'roofline')}")


def _calibrated_queries(s: dict) -> str:
    """How a bundle's run priced its operator queries (the summary's cost_queries_* counts)."""
    predicted, roofline = int(s["cost_queries_predicted"]), int(s["cost_queries_roofline"])
    total = predicted + roofline
    return (f"calibrated costs: {predicted} of {total} operator queries priced by the bundle "
            f"({int(s['cost_queries_out_of_range'])} outside its measured range); {roofline} by the roofline "
            f"or, for collectives, the comm model")


def _spec_decoding(s: dict, spec) -> str:
    """The drafts' outcome as vLLM's "SpecDecoding metrics" line reports it (the summary's spec_* keys)."""
    per_pos = ", ".join(f"{a:.3f}" for a in s["spec_per_position_acceptance_rate"])
    return (f"speculative decoding ({spec.method}, {spec.num_speculative_tokens} drafts): mean acceptance length "
            f"{s['spec_mean_acceptance_length']:.2f}, accepted {s['spec_num_accepted_tokens']} of "
            f"{s['spec_num_draft_tokens']} drafts ({100 * s['spec_draft_acceptance_rate']:.1f} %), per-position "
            f"acceptance rate {per_pos}")


def _calibrated_comm(s: dict) -> str:
    """How the measured comm tables priced the run's collectives (the summary's comm_queries_* counts)."""
    total, analytical = int(s["comm_queries"]), int(s["comm_queries_analytical"])
    extrapolated = int(s["comm_queries_extrapolated"])
    return (f"calibrated comm: {total - analytical} of {total} distinct collectives priced from measured tables"
            + (f" ({extrapolated} off their measured points: a DeepEP shape, token count or multi-node EP size "
               "they do not hold)" if extrapolated else "")
            + f"; {analytical} by the analytical model (no table for that kernel or group)")


@app.command()
def sweep(
    config: Optional[Path] = typer.Option(None, "--config", help="Scenario file (YAML) with the settings every run shares: simulate's keys."),
    serve_params: Optional[Path] = typer.Option(None, "--serve-params", help="JSON file of engine parameter combinations, as vllm bench sweep serve's: a list of objects or an object of named ones, keys as simulate's flags."),
    bench_params: Optional[Path] = typer.Option(None, "--bench-params", help="JSON file of workload parameter combinations (same format); the runs are the product of both files."),
    sla_ttft_ms: Optional[float] = typer.Option(None, "--sla-ttft-ms", help="Not a vLLM flag: TTFT limit (ms) at --sla-percentile."),
    sla_tpot_ms: Optional[float] = typer.Option(None, "--sla-tpot-ms", help="Not a vLLM flag: TPOT limit (ms) at --sla-percentile."),
    sla_percentile: float = typer.Option(99.0, "--sla-percentile", help="Percentile of the TTFT and TPOT the limits apply to (default 99, vllm bench serve's)."),
    jobs: int = typer.Option(1, "--jobs", help="Simulations run in parallel processes."),
    workload_var: Optional[str] = typer.Option(None, "--workload-var", help="As vllm bench sweep serve_workload's: explore each combination over load levels of request_rate or max_concurrency (serial, batch and --workload-iters - 2 levels between)."),
    workload_iters: int = typer.Option(10, "--workload-iters", help="As vllm bench sweep serve_workload's: load levels per combination, the serial and batch runs included (>= 2)."),
    continue_on_error: bool = typer.Option(False, "--continue-on-error", help="As vllm bench sweep's: record a run that cannot be simulated and go on."),
    dry_run: bool = typer.Option(False, "--dry-run", help="As vllm bench sweep's: list the runs and their parameters, simulate nothing."),
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", "-o", help="Write sweep.csv (one row per run: its parameters and results) here."),
) -> None:
    """Simulate every combination of --serve-params x --bench-params and pick the best under an SLA.

    The best run meets --sla-ttft-ms / --sla-tpot-ms at --sla-percentile with no failed request
    and serves the most output tokens per second per GPU."""
    from frontier.sweep import (WORKLOAD_VARS, Sla, best_row, combinations, explore_workloads, format_row, mark_pareto,
                                read_params, run_sweep, write_csv)

    try:
        for flag, value, least in (("--jobs", jobs, 1), ("--workload-iters", workload_iters, 2)):
            if value < least:
                raise ValueError(f"{flag} must be >= {least}, got {value}")
        if workload_var is not None and workload_var not in WORKLOAD_VARS:
            raise ValueError(f"--workload-var {workload_var!r} is not one of {', '.join(WORKLOAD_VARS)}")
        if not 0 <= sla_percentile <= 100:
            raise ValueError(f"--sla-percentile must be in [0, 100], got {sla_percentile}")
        for flag, value in (("--sla-ttft-ms", sla_ttft_ms), ("--sla-tpot-ms", sla_tpot_ms)):
            if value is not None and not value > 0:
                raise ValueError(f"{flag} must be > 0 ms, got {value}")
        if output_dir is not None:
            check_dir_path("--output-dir", output_dir)
        valid, hints = _simulate_keys(), typing.get_type_hints(simulate)
        runs = combinations(read_params(serve_params, "--serve-params"), read_params(bench_params, "--bench-params"))
        for run in runs:
            for key in run.params:
                if key not in valid or key in OUT_ONLY_KEYS:
                    raise ValueError(f"run {run.name!r}: {key!r} is not a parameter a sweep can vary; valid: "
                                     f"simulate's flags but {', '.join(OUT_ONLY_KEYS)}")
                if key == workload_var:     # vLLM: the explorer sets it
                    raise ValueError(f"run {run.name!r} sets {key!r}, which --workload-var {workload_var} explores")

        def spec_of(name: str, params: dict[str, Any]) -> tuple[str, Any]:
            """(name, the run's SimulationSpec, or with --continue-on-error the reason it has none)."""
            try:
                values = _merge({k: _typed(k, v, hints.get(k)) for k, v in params.items()}, config, valid, hints)
                return name, _simulation_spec(values)
            except ValueError as exc:
                if not continue_on_error:
                    raise ValueError(f"run {name!r}: {exc} (--continue-on-error records it and goes on)") from None
                return name, str(exc)

        base = [spec_of(run.name, run.params) for run in runs]
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    if dry_run:
        for run in runs:
            typer.echo(f"{run.name or '(base)'}: {json.dumps(run.params)}")
        more = f", each over {workload_iters} {workload_var} levels" if workload_var else ""
        typer.echo(f"{len(runs)} run(s){more}; nothing simulated (--dry-run)")
        return
    sla = Sla(sla_percentile, sla_ttft_ms, sla_tpot_ms)
    echo = lambda row: typer.echo(format_row(row, sla_percentile))    # noqa: E731
    try:
        if workload_var is None:
            rows = run_sweep(base, sla, jobs, continue_on_error, echo)
            params = [run.params for run in runs]
        else:
            rows, params = explore_workloads(runs, base, spec_of, workload_var, workload_iters, sla, jobs,
                                             continue_on_error, echo)
    except ValueError as exc:
        _fail(str(exc))
        return
    mark_pareto(rows)
    typer.echo("pareto frontier (output tok/s per user vs per GPU, as vllm bench sweep plot_pareto): "
               + ", ".join(r["name"] or "(base)" for r in rows if r["pareto"]))
    best = best_row(rows)
    if sla_ttft_ms is None and sla_tpot_ms is None:
        typer.echo(f"best (no SLA given): {best['name']}" if best else "no run completed")
    else:
        limits = ", ".join(f"{m} p{sla_percentile:g} <= {v:g} ms" for m, v in (("TTFT", sla_ttft_ms),
                                                                              ("TPOT", sla_tpot_ms)) if v is not None)
        typer.echo(f"best under {limits}: {best['name']} ({best['output_throughput_per_gpu']:.1f} tok/s/GPU on "
                   f"{best['num_gpus']} GPUs)" if best else f"no run meets {limits}")
    if output_dir is not None:
        typer.echo(f"wrote {write_csv(rows, params, output_dir / 'sweep.csv')}")


# simulate keys a sweep cannot vary: the per-run output files
OUT_ONLY_KEYS = ("output_dir", "batch_trace", "perfetto", "save_result", "result_dir", "result_filename")


@app.command()
def memory(
    model: str = typer.Option("meta-llama/Llama-3.1-8B", help="HF config.json path/folder or catalogue name."),
    gpu: str = typer.Option("H100", help="GPU type."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp"),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel/--no-enable-expert-parallel"),
    max_num_seqs: Optional[int] = typer.Option(None),
    max_num_batched_tokens: Optional[str] = typer.Option(None, help=HUMAN_INT_HELP),
    max_model_len: Optional[str] = typer.Option(None, help=MAX_MODEL_LEN_HELP),
    block_size: Optional[int] = typer.Option(None),
    gpu_memory_utilization: Optional[float] = typer.Option(None, help="Default: the release's (0.92; 0.9 before vLLM 0.20)."),
    num_gpu_blocks_override: Optional[int] = typer.Option(None),
    kv_cache_memory_bytes: Optional[str] = typer.Option(None, help="KV-cache bytes per GPU, as vLLM: 8G = 8 GiB, 8g = 8e9; skips profiling and ignores --gpu-memory-utilization."),
    kv_cache_dtype: str = typer.Option("auto", help=KV_DTYPE_HELP),
    mamba_cache_dtype: str = typer.Option("auto", help=MAMBA_DTYPE_HELP),
    mamba_ssm_cache_dtype: str = typer.Option("auto", help=MAMBA_SSM_DTYPE_HELP),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q", help=QUANT_HELP),
    enforce_eager: bool = typer.Option(False, "--enforce-eager/--no-enforce-eager"),
    disable_hybrid_kv_cache_manager: bool = typer.Option(False, "--disable-hybrid-kv-cache-manager", help=HYBRID_KV_HELP),
    language_model_only: bool = typer.Option(False, "--language-model-only", help=LM_ONLY_HELP),
    limit_mm_per_prompt: Optional[str] = typer.Option(None, "--limit-mm-per-prompt", help=MM_LIMIT_HELP),
    mm_encoder_tp_mode: str = typer.Option("weights", "--mm-encoder-tp-mode", help=MM_TP_HELP),
    cudagraph_capture_sizes: Optional[str] = typer.Option(None, "--cudagraph-capture-sizes", help=CG_HELP),
    max_cudagraph_capture_size: Optional[int] = typer.Option(None, "--max-cudagraph-capture-size", help="Largest CUDA-graph capture size in tokens (default: vLLM's)."),
    compilation_config: Optional[str] = typer.Option(None, "--compilation-config", "-cc", help=CC_HELP),
    optimization_level: int = typer.Option(2, "--optimization-level", "-O", help=O_HELP),
    async_scheduling: Optional[bool] = typer.Option(None, "--async-scheduling/--no-async-scheduling", help="Sets the tokens in flight a sliding-window group reserves (default: the release's, on from vLLM 0.14)."),
    enable_prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching", help="As vllm serve's; for Gated DeltaNet models (Qwen3.5) it sets vLLM's mamba cache mode (align / none), hence the block size and the state blocks a request holds."),
    predictor_bundle: Optional[Path] = typer.Option(None, help="Bundle whose profiled memory rows replace the estimated activation / non-torch / CUDA-graph terms."),
    vllm_version: str = typer.Option("0.33.0", "--vllm-version", help="vLLM release whose KV-budget formula to use (0.10 to 0.33; simulator/vllm_version.py lists what changed)."),
    all2all_backend: str = typer.Option("allgather_reducescatter", "--all2all-backend", help="As vllm serve's: deepep_low_latency / nixl_ep with DP x EP default --max-num-batched-tokens to 256 (vLLM 0.20+), which sets the activation peak."),
    enable_eplb: bool = typer.Option(False, "--enable-eplb/--no-enable-eplb", help="As vllm serve's; with --eplb-config's num_redundant_experts every EP rank holds (experts + redundant) / EP experts."),
    eplb_config: Optional[str] = typer.Option(None, "--eplb-config", help="vLLM --eplb-config JSON; only num_redundant_experts is simulated."),
    performance_mode: str = typer.Option("balanced", "--performance-mode", help="As vllm serve's (0.17+): throughput doubles the defaulted --max-num-batched-tokens and --max-num-seqs; interactivity captures CUDA graphs at every size 1..32."),
    speculative_config: Optional[str] = typer.Option(None, "--speculative-config", help="As vllm serve's (methods eagle, eagle3, mtp, draft_model): the draft head's layer, or a draft model's layers, add their weights and KV, and a uniform decode of 1 + k tokens a request sets the CUDA-graph sizes."),
    enable_lora: bool = typer.Option(False, "--enable-lora/--no-enable-lora", help=LORA_HELP),
    max_loras: int = typer.Option(1, "--max-loras", help="As vllm serve's: adapter slots on the GPU (default 1)."),
    max_lora_rank: int = typer.Option(16, "--max-lora-rank", help="As vllm serve's: the slots' rank (default 16)."),
    engine: str = typer.Option("vllm", "--engine", help="vllm (default) or sglang: SGLang 0.5.23's start-up sizing instead (mem_fraction_static, token pool, max_running_requests), with its flags below."),
    mem_fraction_static: Optional[float] = typer.Option(None, "--mem-fraction-static", help="SGLang: share of the memory free at start for weights + KV pool (default: SGLang's formula).", rich_help_panel=SGLANG_HELP),
    chunked_prefill_size: Optional[int] = typer.Option(None, "--chunked-prefill-size", help="SGLang (default by GPU memory; -1: no chunking).", rich_help_panel=SGLANG_HELP),
    max_running_requests: Optional[int] = typer.Option(None, "--max-running-requests", help="SGLang (default: from the pool and --context-length).", rich_help_panel=SGLANG_HELP),
    max_total_tokens: Optional[int] = typer.Option(None, "--max-total-tokens", help="SGLang: cap on the token pool.", rich_help_panel=SGLANG_HELP),
    context_length: Optional[int] = typer.Option(None, "--context-length", help="SGLang (default: the model's max_position_embeddings).", rich_help_panel=SGLANG_HELP),
    page_size: Optional[int] = typer.Option(None, "--page-size", help="SGLang (default: the default attention backend's).", rich_help_panel=SGLANG_HELP),
    cuda_graph_max_bs: Optional[int] = typer.Option(None, "--cuda-graph-max-bs", help="SGLang (default by GPU memory and TP).", rich_help_panel=SGLANG_HELP),
    disable_cuda_graph: bool = typer.Option(False, "--disable-cuda-graph/--no-disable-cuda-graph", help="SGLang: no graph memory reserved.", rich_help_panel=SGLANG_HELP),
    ep_size: Optional[int] = typer.Option(None, "--ep-size", "--expert-parallel-size", "--ep", help=EP_SIZE_HELP, rich_help_panel=SGLANG_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object for machines."),
) -> None:
    """Print the KV-cache budget breakdown of one GPU rank, by vLLM's formula (0.33's, or --vllm-version's),
    or SGLang 0.5.23's start-up sizing (--engine sglang)."""
    from simulator.engine_args import EngineArgs
    from simulator.lora import slot_bytes_per_rank
    from simulator.memory import parse_human_int
    from simulator.simulation import build_memory, fit_max_model_len, resolve_engine

    sglang_flags = dict(mem_fraction_static=mem_fraction_static, chunked_prefill_size=chunked_prefill_size,
                        max_running_requests=max_running_requests, max_total_tokens=max_total_tokens,
                        context_length=context_length, page_size=page_size, cuda_graph_max_bs=cuda_graph_max_bs,
                        disable_cuda_graph=disable_cuda_graph or None, ep_size=ep_size)
    if engine not in ENGINES:
        _fail(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    vllm_given = {"pipeline_parallel_size": pipeline_parallel_size != 1, "data_parallel_size": data_parallel_size != 1,
                  "enable_expert_parallel": enable_expert_parallel, "max_num_seqs": max_num_seqs is not None,
                  "max_num_batched_tokens": max_num_batched_tokens is not None,
                  "max_model_len": max_model_len is not None, "block_size": block_size is not None,
                  "gpu_memory_utilization": gpu_memory_utilization is not None,
                  "num_gpu_blocks_override": num_gpu_blocks_override is not None,
                  "kv_cache_memory_bytes": kv_cache_memory_bytes is not None, "enforce_eager": enforce_eager,
                  "disable_hybrid_kv_cache_manager": disable_hybrid_kv_cache_manager,
                  "limit_mm_per_prompt": limit_mm_per_prompt is not None,
                  "mm_encoder_tp_mode": mm_encoder_tp_mode != "weights",
                  "cudagraph_capture_sizes": cudagraph_capture_sizes is not None,
                  "max_cudagraph_capture_size": max_cudagraph_capture_size is not None,
                  "compilation_config": compilation_config is not None, "predictor_bundle": predictor_bundle is not None,
                  "speculative_config": speculative_config is not None, "vllm_version": vllm_version != "0.33.0",
                  "enable_eplb": enable_eplb, "eplb_config": eplb_config is not None,
                  "performance_mode": performance_mode != "balanced", "async_scheduling": async_scheduling is not None,
                  "enable_prefix_caching": not enable_prefix_caching, "mamba_cache_dtype": mamba_cache_dtype != "auto",
                  "mamba_ssm_cache_dtype": mamba_ssm_cache_dtype != "auto", "enable_lora": enable_lora,
                  "max_loras": max_loras != 1, "max_lora_rank": max_lora_rank != 16}
    foreign = _foreign_flag(engine, [k for k, v in vllm_given.items() if v],
                            [k for k, v in sglang_flags.items() if v is not None])
    if foreign:
        _fail(foreign)
    if engine == "sglang":
        _sglang_memory(model, gpu, tensor_parallel_size, kv_cache_dtype, quantization, language_model_only,
                       sglang_flags, as_json)
        return
    try:
        cg = {"cudagraph_capture_sizes": _int_list(cudagraph_capture_sizes, "--cudagraph-capture-sizes"),
              "max_cudagraph_capture_size": max_cudagraph_capture_size, "compilation_config": compilation_config}
        _apply_compilation_config(cg)
        eplb = {"eplb_config": eplb_config}
        _apply_eplb_config(eplb)
        tokens = {"max_model_len": max_model_len, "max_num_batched_tokens": max_num_batched_tokens}
        _apply_token_counts(tokens)
        cfg = _json_object(speculative_config, "--speculative-config")   # acceptance does not change memory
        spec = {"speculative_config": cfg, "spec_acceptance_rate": None if cfg is None
                or cfg.get("rejection_sample_method") == "synthetic" else [1.0]}
        _apply_speculative_config(spec)
        args = EngineArgs(
            model=model, gpu=gpu, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
            enable_expert_parallel=enable_expert_parallel, max_num_seqs=max_num_seqs, **tokens,
            block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
            num_gpu_blocks_override=num_gpu_blocks_override, enforce_eager=enforce_eager,
            disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager, enable_prefix_caching=enable_prefix_caching,
            language_model_only=language_model_only, limit_mm_per_prompt=limit_mm_per_prompt or (),
            mm_encoder_tp_mode=mm_encoder_tp_mode, optimization_level=optimization_level, async_scheduling=async_scheduling,
            kv_cache_dtype=kv_cache_dtype, quantization=quantization, vllm_version=vllm_version,
            mamba_cache_dtype=mamba_cache_dtype, mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
            all2all_backend=all2all_backend, performance_mode=performance_mode, enable_eplb=enable_eplb, **eplb, **cg,
            **spec, kv_cache_memory_bytes=None if kv_cache_memory_bytes is None else parse_human_int(kv_cache_memory_bytes),
            enable_lora=enable_lora, max_loras=max_loras, max_lora_rank=max_lora_rank)
        resolved = resolve_engine(args)
        profiled, note = (None, None) if predictor_bundle is None else _bundle_memory_terms(predictor_bundle, resolved)
        budget = build_memory(resolved, profiled)
        resolved = fit_max_model_len(resolved, budget)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    gib = 1 << 30
    report = {
        "model": resolved.model.name, "gpu": resolved.gpu.name,
        "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
        "data_parallel_size": data_parallel_size,
        "gpu_memory_utilization": args.effective_gpu_memory_utilization,
        "vllm_version": args.vllm_version,
        "total_gib": resolved.gpu.memory_bytes / gib,
        "requested_gib": budget.requested_bytes / gib,
        "weights_gib": budget.weights_bytes / gib,
        "vision_encoder_gib": resolved.model.vision_bytes_per_rank(tensor_parallel_size) / gib,   # first PP stage
        "draft_model_gib": (resolved.draft_model.weight_bytes_per_rank(resolved.parallel) / gib
                            if resolved.draft_model is not None else 0.0),      # --speculative-config draft_model
        "lora_slots_gib": (slot_bytes_per_rank(resolved.model, resolved.parallel, args.lora) / gib
                           if args.lora is not None else 0.0),                  # --enable-lora
        "activation_gib": budget.activation_bytes / gib,
        "non_torch_gib": budget.non_torch_bytes / gib,
        "cuda_graph_gib": budget.cuda_graph_bytes / gib,
        "kv_cache_gib": budget.kv_bytes / gib,
        "bytes_per_block": budget.bytes_per_block,
        "block_size": budget.block_size,
        "num_gpu_blocks": budget.num_gpu_blocks,
        "kv_cache_tokens": budget.logged_kv_cache_tokens(resolved.max_model_len),
        "max_model_len": resolved.max_model_len,
        "max_concurrency": budget.max_concurrency(resolved.max_model_len),
        "max_num_seqs": resolved.max_num_seqs,
        "max_num_batched_tokens": resolved.max_num_batched_tokens,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "kv_cache_dtype": args.kv_cache_dtype,
        "kv_bytes_per_elem": resolved.model.quant.kv_bytes_per_elem,
        "kv_cache_groups": [[g.kind, len(g.layers)] for g in budget.layout.groups],
        "mamba_state_bytes": budget.layout.mamba_state_bytes,
        "mamba_blocks_per_request": budget.layout.mamba_blocks_per_request,
        "sources": dict(budget.sources),
        "start_error": budget.start_error(resolved.max_model_len),
        "bundle_note": note,
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"{report['model']} on {report['gpu']} (TP{tensor_parallel_size} PP{pipeline_parallel_size}), "
               f"per GPU, vLLM {'.'.join(map(str, resolved.vllm_version))} formula:")
    for key in ("total_gib", "requested_gib", "weights_gib", "activation_gib", "non_torch_gib",
                "cuda_graph_gib", "kv_cache_gib"):
        source = report["sources"].get(key[:-4], "given" if key == "kv_cache_gib" and args.kv_cache_memory_bytes else "")
        typer.echo(f"  {key[:-4].replace('_', ' '):<28} {report[key]:>10.2f} GiB" + (f"  ({source})" if source else ""))
        if key == "weights_gib" and report["vision_encoder_gib"] and pipeline_parallel_size == 1:
            typer.echo(f"    {'of which vision encoder':<26} {report['vision_encoder_gib']:>10.2f} GiB")
        if key == "weights_gib" and report["draft_model_gib"]:
            typer.echo(f"    {'of which draft model':<26} {report['draft_model_gib']:>10.2f} GiB")
        if key == "weights_gib" and report["lora_slots_gib"]:
            typer.echo(f"    {'of which LoRA slots':<26} {report['lora_slots_gib']:>10.2f} GiB")
    typer.echo(f"  {'num_gpu_blocks':<28} {report['num_gpu_blocks']:>10}  "
               f"({report['bytes_per_block']} bytes per block, KV {report['kv_bytes_per_elem']:g} byte(s) per element; groups "
               f"{', '.join(f'{n} {kind}' for kind, n in report['kv_cache_groups'])} layers)")
    if report["mamba_state_bytes"]:
        page = budget.layout.page_bytes
        typer.echo(f"  {'block size':<28} {report['block_size']:>10}  tokens (vLLM's attention block aligned to the "
                   f"{'Mamba2' if resolved.model.block_pattern else 'Gated DeltaNet'} state: {report['mamba_state_bytes']:,} "
                   f"bytes a layer, padded to the "
                   f"{page:,}-byte page; {report['mamba_blocks_per_request']} state block(s) per request "
                   f"in each mamba group, prefix caching {'on' if enable_prefix_caching else 'off'})")
    typer.echo(f"GPU KV cache size: {report['kv_cache_tokens']:,} tokens")
    typer.echo(f"Maximum concurrency for {report['max_model_len']:,} tokens per request: "
               f"{report['max_concurrency']:.2f}x")
    if report["start_error"]:
        typer.echo(report["start_error"])
    for line in (note, resolved.model.vision_encoder_note()):
        if line:
            typer.echo(f"note: {line}")


def _sglang_memory(model: str, gpu: str, tp: int, kv_cache_dtype: str, quantization: str | None,
                   language_model_only: bool, flags: dict[str, Any], as_json: bool) -> None:
    """``frontier memory --engine sglang``: SGLang 0.5.23's start-up sizing of one TP group."""
    from simulator.engine_args import EngineArgs
    from simulator.sglang_layout import SglangArgs, resolve_sglang
    from simulator.sglang_run import sglang_resolved
    try:
        args = SglangArgs(**{k: v for k, v in flags.items() if v is not None})
        resolved = sglang_resolved(EngineArgs(model=model, gpu=gpu, tensor_parallel_size=tp, kv_cache_dtype=kv_cache_dtype,
                                              quantization=quantization, language_model_only=language_model_only), args)
        lay = resolve_sglang(args, resolved.model, resolved.parallel, resolved.gpu)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    gib, c = 1 << 30, lay.config
    report = {"model": resolved.model.name, "gpu": resolved.gpu.name, "tensor_parallel_size": tp,
              "ep_size": resolved.parallel.ep, "engine": "sglang 0.5.23", "total_gib": resolved.gpu.memory_bytes / gib,
              "free_at_start_gib": lay.pre_load_free_bytes / gib, "mem_fraction_static": lay.mem_fraction_static,
              "weights_gib": lay.weight_bytes / gib, "kv_bytes_per_token": lay.kv_bytes_per_token,
              "kv_cache_gib": c.max_total_tokens * lay.kv_bytes_per_token / gib,
              "max_total_num_tokens": c.max_total_tokens, "page_size": c.page_size,
              "max_running_requests": c.max_running_requests, "context_len": c.context_length,
              "chunked_prefill_size": c.chunked_prefill_size,
              "cuda_graph_decode_bs": list(lay.graphs.decode_sizes), "cuda_graph_prefill_tokens": list(lay.graphs.prefill_sizes)}
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    moe = f", MoE EP{resolved.parallel.ep} x TP{resolved.parallel.moe_tp}" if resolved.parallel.ep > 1 else ""
    typer.echo(f"{report['model']} on {report['gpu']} (TP{tp}{moe}), per GPU, SGLang 0.5.23 start-up:")
    for key in ("total_gib", "free_at_start_gib", "weights_gib", "kv_cache_gib"):
        typer.echo(f"  {key[:-4].replace('_', ' '):<28} {report[key]:>10.2f} GiB"
                   + ("  (estimate: the GPU's memory less CUDA context and communicators)" if key == "free_at_start_gib"
                      else ""))
    typer.echo(f"  {'mem_fraction_static':<28} {report['mem_fraction_static']:>10}")
    typer.echo(f"  {'KV bytes per token':<28} {report['kv_bytes_per_token']:>10}  (page size {c.page_size})")
    typer.echo(f"max_total_num_tokens={c.max_total_tokens:,}, max_running_requests={c.max_running_requests}, "
               f"context_len={c.context_length}, chunked_prefill_size={c.chunked_prefill_size}, cuda graph max bs "
               f"{max(lay.graphs.decode_sizes, default=0)}")


def _bundle_memory_terms(bundle: Path, resolved) -> tuple[Any, str | None]:
    """(the profiled non-KV terms a bundle holds for the resolved model and layout, or None; a note
    when it holds none). ValueError when they were profiled on another GPU than the resolved one."""
    from calibration.bundle import read_manifest
    from calibration.memory_model import overheads_for
    manifest = read_manifest(bundle)
    profiled = overheads_for(manifest.get("memory"), resolved.model.name, resolved.parallel)
    bundle_gpu = str(manifest.get("gpu", ""))
    if profiled is not None and any(v is not None for v in astuple(profiled)):
        if bundle_gpu and bundle_gpu.lower() != resolved.gpu.name.lower():
            raise ValueError(f"--predictor-bundle {bundle} was profiled on {bundle_gpu}, not {resolved.gpu.name}; "
                             f"its memory terms hold for {bundle_gpu} only")
        return profiled, None
    p = resolved.parallel
    return profiled, (f"{bundle} has no profiled memory terms for {resolved.model.name} at TP{p.tp} PP{p.pp} "
                      f"EP{p.ep}: the activation, non-torch and CUDA-graph terms are vLLM's estimates")


@app.command()
def gpus() -> None:
    """List the GPU catalogue: memory, HBM bandwidth, dense tensor FLOP/s (fp8 / fp4: "-" without
    those tensor cores), intra-node link, SM version and hourly price."""
    from frontier.gpu import get_gpu, intra_node_link, list_gpus
    names = list_gpus()
    width = max([12, *(len(n) for n in names)])

    def tflops(x: float) -> str:
        return f"{x / 1e12:7.0f}" if x > 0 else f"{'-':>7}"

    typer.echo(f"{'GPU':<{width}} {'memory':>11}  {'HBM':>10}  {'bf16':>7} {'fp8':>7} {'fp4':>7}  "
               f"{'intra-node link':>20}  {'sm':>3}  {'price':>7}   (TFLOP/s dense)")
    for name in names:
        g = get_gpu(name)
        link = f"{intra_node_link(g)} {g.nvlink_bw_bytes_per_s / 1e9:.0f} GB/s"
        typer.echo(f"{g.name:<{width}} {g.memory_bytes / (1 << 30):7.1f} GiB  {g.hbm_bw_bytes_per_s / 1e12:5.2f} TB/s  "
                   f"{tflops(g.bf16_flops)} {tflops(g.fp8_flops)} {tflops(g.fp4_flops)}  {link:>20}  "
                   f"{g.sm_version:>3}  ${g.price_per_hour_usd:.2f}/h")


@app.command()
def models() -> None:
    """List the model catalogue (names for --model): architecture, layers, experts, weight
    quantization, or why the simulator refuses the model."""
    from frontier.model_spec import catalogue_names, load_model_spec
    for name in catalogue_names():
        try:
            m = load_model_spec(name)
        except ValueError as exc:     # "<name>: unsupported model_type 'x'; supported: ..." -> the reason
            reason = str(exc).removeprefix(f"{name}: ").split("; supported:")[0]
            typer.echo(f"{name:<52} not supported ({reason})")
            continue
        experts = f"{m.num_experts} experts top-{m.num_experts_per_tok}" if m.is_moe else "dense"
        kind = "Mamba2" if m.block_pattern else "Gated DeltaNet"
        only = f"  {m.num_linear_attention_layers} {kind} layers" if m.num_linear_attention_layers else ""
        typer.echo(f"{name:<52} {m.architecture:<32} {m.num_layers:>3} layers  {experts:<20} "
                   f"weights {m.quant.label}{only}")


@app.command("import-profiles")
def import_profiles(
    source: str = typer.Option(..., "--source", help="aiconfigurator or vidur."),
    path: Optional[Path] = typer.Option(None, "--path", help="Data folder (aiconfigurator: systems/ or its parent; default the installed aiconfigurator_core). Required for vidur."),
    out: Path = typer.Option(..., "--out", help="Profile root to write (hive family=/gpu= folders)."),
    gpu: Optional[list[str]] = typer.Option(None, "--gpu", help="aiconfigurator only: AIC or catalogue GPU name; repeatable."),
    family: Optional[list[str]] = typer.Option(None, "--family", help="aiconfigurator only: linear, attention, moe, comm, gdn, encoder_attention; repeatable."),
    version: Optional[str] = typer.Option(None, "--version", help="aiconfigurator only: vLLM version folder (default: current)."),
) -> None:
    """Import public measured profiles (AIConfigurator perf DB, Vidur CSVs) into the profile schema."""
    try:
        check_dir_path("--out", out)
        if source == "aiconfigurator":
            from calibration.importers.aiconfigurator import import_aiconfigurator_report
            report = import_aiconfigurator_report(path, out, gpus=gpu, families=family, version=version)
        elif source == "vidur":
            if path is None or gpu or family or version:
                _fail("--source vidur needs --path and takes no --gpu/--family/--version")
            from calibration.importers.vidur import import_vidur_report
            report = import_vidur_report(path, out)
        else:
            _fail(f"unknown --source {source!r}; valid: aiconfigurator, vidur")
    except ValueError as exc:
        _fail(str(exc))
    width = max([12, *(len(g) for g in report.rows_by_gpu)])
    for g, fams in sorted(report.rows_by_gpu.items()):
        typer.echo(f"{g:<{width}} " + "  ".join(f"{f} {n:,}" for f, n in sorted(fams.items())))
    typer.echo(f"total: {sum(report.rows.values()):,} rows -> {out}")
    for line in report.skipped:
        typer.echo(f"skipped: {line}")


CAL_HELP = "Calibration"


def _resolve_profile_gpu(root: Path, gpu: str, imported: bool = False, where: str | None = None) -> str:
    """The partition name of `gpu` under a profile root (catalogue name or as written).
    `imported`: the root was just imported for `gpu` alone, so its one partition is it;
    `where`: what the error names instead of the root (a root imported into a temporary folder)."""
    if not root.is_dir():
        raise ValueError(f"--profiles {root} is not a directory (a profile root: family=*/gpu=*/part-*.parquet, "
                         f"as `frontier import-profiles` or `frontier profile` write it)")
    parts = sorted(p.name.split("=", 1)[1] for p in root.glob("family=*/gpu=*"))
    if gpu in parts:
        return gpu
    try:
        from frontier.gpu import get_gpu
        name = get_gpu(gpu).name
    except (ValueError, KeyError):
        name = None
    if name in parts:
        return name
    if imported and len(set(parts)) == 1:
        return parts[0]
    found = ", ".join(sorted(set(parts))) or "none (no family=*/gpu=* folders)"
    raise ValueError(f"no profiles for gpu {gpu!r} {where or f'under {root}'}; found gpus: {found}")


@app.command()
def calibrate(
    profiles: Optional[Path] = typer.Option(None, "--profiles", help="Profile root (hive family=/gpu= folders)."),
    source: Optional[str] = typer.Option(None, "--source", help="aiconfigurator or vidur: import that public data first (instead of --profiles)."),
    source_path: Optional[Path] = typer.Option(None, "--source-path", help="AIC data folder (default: the installed aiconfigurator_core); the Vidur dataset folder (required for vidur)."),
    gpu: str = typer.Option(..., "--gpu", help="GPU (catalogue or AIC name), e.g. H100-SXM or h100_sxm."),
    framework_version: Optional[str] = typer.Option(None, "--framework-version", help="Framework version to fit, e.g. 0.24.0 (default: all rows)."),
    out: Path = typer.Option(..., "--out", help="Bundle file to write (.joblib); its manifest goes beside it."),
    holdout_fraction: float = typer.Option(0.2, "--holdout-fraction", help="Share of rows (or token points) held out for the error report."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the held-out split."),
    holdout_by: str = typer.Option("rows", "--holdout-by", help="rows (random rows; default) or token-points (whole token counts unseen by every shape; harder)."),
    family: Optional[list[str]] = typer.Option(None, "--family", help="linear, attention, moe, comm, elementwise, gdn, encoder_attention; repeatable (default all)."),
) -> None:
    """Fit per-family predictors for one GPU, report held-out error and write a bundle."""
    import tempfile
    import time

    from calibration.evaluate import HOLDOUT_BY, calibrate as run_calibrate
    if (profiles is None) == (source is None):
        _fail("give exactly one of --profiles DIR or --source aiconfigurator|vidur")
    if holdout_by not in HOLDOUT_BY:
        _fail(f"unknown --holdout-by {holdout_by!r}; valid: {', '.join(HOLDOUT_BY)}")
    t0 = time.perf_counter()
    try:
        check_file_path("--out", out)
        with tempfile.TemporaryDirectory(prefix="frontier-import-") as tmp:
            root = profiles
            if source == "vidur":
                if source_path is None:
                    _fail("--source vidur needs --source-path (the Vidur dataset folder, data/profiling inside)")
                from calibration.importers.vidur import import_vidur
                root = Path(tmp)
                import_vidur(source_path, root)   # every GPU it holds; --gpu picks one below
            elif source is not None:
                if source != "aiconfigurator":
                    _fail(f"unknown --source {source!r}; valid: aiconfigurator, vidur")
                from calibration.importers.aiconfigurator import import_aiconfigurator_report
                root = Path(tmp)
                import_aiconfigurator_report(source_path, root, gpus=[gpu], families=family,
                                             version=framework_version)
            where = f"in the Vidur data under {source_path}" if source == "vidur" else None
            manifest = run_calibrate(root, _resolve_profile_gpu(root, gpu, source == "aiconfigurator", where), out,
                                     framework_version, holdout_fraction, split_seed, families=family,
                                     holdout_by=holdout_by)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    _print_errors(manifest)
    typer.echo(f"wrote {out} ({manifest['payload_bytes'] / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s")


def _print_errors(manifest: dict) -> None:
    from calibration.bundle import source_label
    typer.echo(f"{manifest['gpu']} {source_label(manifest)}: "
               f"held-out APE % (split {manifest['split']['holdout_fraction']} by "
               f"{manifest['split'].get('holdout_by', 'token-points')}, seed {manifest['split']['split_seed']})")
    typer.echo(f"  {'family':<11} {'rows':>8} {'p50':>7} {'p95':>7} {'MAPE':>7} {'base p50':>9} {'base p95':>9} {'base MAPE':>10} {'OOR':>6}")
    notes = False
    for fam, e in manifest["heldout_error"].items():
        typer.echo(f"  {fam:<11} {e['rows']:>8} {e['p50']:>7.2f} {e['p95']:>7.2f} {e['mape']:>7.2f} "
                   f"{e['baseline_p50']:>9.2f} {e['baseline_p95']:>9.2f} {e['baseline_mape']:>10.2f} {e['out_of_range']:>6}")
        subs = e.get("submodels") or {}
        for name, s in subs.items() if len(subs) > 1 else ():
            mark = " *" if s.get("scope") == "module" else ""
            notes = notes or bool(mark)
            typer.echo(f"    {name + mark:<30} {s['rows']:>6} {s['p50']:>7.2f} {s['p95']:>7.2f} {s['mape']:>7.2f}")
    if notes:
        typer.echo("  * fitted on whole-module rows (e.g. AIC's MLA layers); the simulator prices the module's "
                   "ops instead (simulator/predictor_cost.py)")
    if not any("submodels" in e for e in manifest["heldout_error"].values()):
        typer.echo("  (this manifest predates per-sub-model errors; a bundle calibrated now records them)")


@app.command()
def evaluate(
    bundle: Path = typer.Option(..., "--bundle", help="Bundle file written by `frontier calibrate`."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object for machines."),
) -> None:
    """Report a bundle's held-out error per family next to the token-count-only baseline."""
    from calibration.bundle import read_manifest
    try:
        manifest = read_manifest(bundle)
        if not isinstance(manifest.get("heldout_error"), dict) or not isinstance(manifest.get("split"), dict):
            held = "profiled memory terms only" if manifest.get("memory") else "no held-out report"
            raise ValueError(f"bundle {bundle} holds {held}; `frontier calibrate` writes the held-out error "
                             f"`frontier evaluate` reports")
    except ValueError as exc:
        _fail(str(exc))
        return
    if as_json:
        keys = ("rows", "p50", "p95", "mape", "baseline_p50", "baseline_p95", "baseline_mape", "out_of_range")
        typer.echo(json.dumps({"gpu": manifest["gpu"], "framework": manifest.get("framework"),
                               "framework_version": manifest.get("framework_version"),
                               "frameworks": manifest.get("frameworks"),
                               "split": manifest["split"],
                               "families": {f: {**{k: e[k] for k in keys}, "submodels": e.get("submodels") or {}}
                                            for f, e in manifest["heldout_error"].items()}},
                              indent=2))
        return
    _print_errors(manifest)


def _csv_row_lines(text: str, path: Path) -> list[int]:
    """The line on which each data row of CSV ``text`` (read from ``path``) starts (blank lines
    skipped, as pandas skips them); ValueError naming the first row whose field count differs from
    the header's: pandas would read rows with extra fields by turning their first columns into the
    index (every column shifted) or stop with a bare tokenizer message."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text, newline=""))
    header = next((fields for fields in reader if fields), None)    # pandas skips blank lines before it too
    lines, start = [], reader.line_num + 1
    for fields in reader:
        if fields:
            if len(fields) != len(header):
                raise ValueError(f"--input {path} line {start} has {len(fields)} fields, its header "
                                 f"{len(header)}; a CSV of operator rows has one field per header column")
            lines.append(start)
        start = reader.line_num + 1
    return lines


@app.command()
def predict(
    bundle: Path = typer.Option(..., "--bundle", help="Bundle file written by `frontier calibrate`."),
    input: Path = typer.Option(..., "--input", help="CSV of operator rows: a `family` column plus that family's profile-schema columns (optional `timing_mode`)."),
    output: Optional[Path] = typer.Option(None, "--output", help="CSV to write (default: print to stdout)."),
) -> None:
    """Price operator rows from a file: adds predicted_latency_s and out_of_range."""
    import io

    import numpy as np
    import pandas as pd

    from calibration.bundle import load_bundle
    from calibration.features import canon_from_rows
    from frontier.profile_schema import check_operator_rows
    try:
        b = load_bundle(bundle)
        if not input.is_file():
            raise ValueError(f"--input {input} does not exist (a CSV of operator rows)")
        try:
            text = input.read_bytes().decode("utf-8")       # read once; parsed as fields, typed and as text
            lines = _csv_row_lines(text, input)
            df = pd.read_csv(io.StringIO(text))
        except pd.errors.EmptyDataError:
            raise ValueError(f"--input {input} is empty; need a header row with `family` and the "
                             f"family's profile-schema columns") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"--input {input} is not a UTF-8 text file (byte {exc.start})") from None
        if "family" not in df.columns:
            raise ValueError(f"{input} has no `family` column")
        if "timing_mode" not in df.columns:
            df["timing_mode"] = "kernel"
        # the rows as written (text), echoed back with the two new columns: no 16 -> 16.0
        echo = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).assign(timing_mode=df["timing_mode"])
        df.index = lines if len(lines) == len(df) else np.arange(2, len(df) + 2)   # lines, for messages
        pred = np.full(len(df), np.nan)
        oor = np.ones(len(df), dtype=bool)
        for col, valid in (("family", "a bundle family, e.g. linear"), ("timing_mode", "kernel, launch")):
            empty = df.index[df[col].isna()]
            if len(empty):
                raise ValueError(f"{input} line {empty[0]}: {col} is empty; valid: {valid}")
        for (fam, mode), idx in df.groupby(["family", "timing_mode"]).indices.items():
            predictor = b.predictor(fam)      # unknown family: ValueError naming the bundle's families
            check_operator_rows(df.iloc[idx], fam, where=f"{input} line")
            try:
                canon = canon_from_rows(df.iloc[idx], fam)
                pred[idx], oor[idx] = predictor.predict_canon(canon, mode)
            except KeyError as exc:
                raise ValueError(f"{fam} rows in {input} lack column {exc}") from None
            except ValueError as exc:
                raise ValueError(f"{fam} rows in {input}: {exc}") from None
    except (ValueError, pd.errors.ParserError) as exc:     # ParserError: e.g. a quote left open
        _fail(f"--input {input}: {str(exc).strip()}" if isinstance(exc, pd.errors.ParserError) else str(exc))
        return
    df = echo.assign(predicted_latency_s=pred, out_of_range=oor)
    unpriced = int(np.isnan(pred).sum())
    note = (f"{unpriced} {'row has' if unpriced == 1 else 'rows have'} no sub-model in {bundle} (a dtype or "
            f"kernel it has no measured rows for): predicted_latency_s empty, out_of_range true" if unpriced else "")
    if output is None:
        typer.echo(df.to_csv(index=False), nl=False)
        if note:
            typer.echo(f"note: {note}", err=True)
    else:
        df.to_csv(output, index=False)
        typer.echo(f"wrote {output} ({len(df)} rows, {int(oor.sum())} out of range{'; ' + note if note else ''})")


@app.command()
def profile(
    model: str = typer.Option(..., help="HF config.json path/folder or catalogue name, e.g. meta-llama/Llama-3.1-8B."),
    out: Path = typer.Option(..., "--out", help="Profile root; rows land in family=<f>/gpu=<gpu>/part-*.parquet."),
    tensor_parallel_size: str = typer.Option("1", "--tensor-parallel-size", "-tp", help="Comma list of TP sizes, e.g. 1,2,4,8."),
    expert_parallel_size: str = typer.Option("1", "--expert-parallel-size", "-ep", help="Comma list of EP sizes (MoE models; each must divide TP)."),
    families: Optional[str] = typer.Option(None, help="Comma list of linear, attention, moe, elementwise, memory (default: all the schema stores)."),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N."),
    dtype: Optional[str] = typer.Option(None, help="bf16, fp16 or fp32 (default bf16 on cuda, fp32 on cpu)."),
    gpu: Optional[str] = typer.Option(None, help="Catalogue GPU name for the gpu= partition (default: from the device name)."),
    grid: Optional[Path] = typer.Option(None, help="YAML/JSON grid file overriding the device's default shapes (keys: profiler/grid.py SweepGrid)."),
    backend: str = typer.Option("torch", help="torch (always); on CUDA, if installed: vllm (its elementwise, attention and MoE kernels) or flashinfer (attention); other families run torch, and rows name the backend."),
    warmup_ms: float = typer.Option(20.0, help="Warm-up time per operator and timing mode."),
    budget_ms: float = typer.Option(100.0, help="Sampling time per operator and timing mode."),
    max_chunks: Optional[int] = typer.Option(None, help="Stop after this many new chunks (rerun to continue)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the grid size and an estimated time; run nothing."),
) -> None:
    """Profile one rank's operators per parallel layout; write Parquet profiles.

    For every TP (x EP) layout, time the operators ONE rank of that shard
    runs on this device, collectives stubbed out: sharded GEMMs (QKV, O,
    gate-up, down, LM head), attention over mixed prefill/decode batches
    on a paged KV cache, MoE experts under balanced and skewed routing,
    norms / RoPE / activation / KV write; plus a dummy-weight memory run.
    --backend vllm / flashinfer times them with those engines' own kernels.

    Two timing modes per operator: kernel (CUDA-graph replay between
    device events, cold L2; on CPU the fastest 20% of calls) and launch
    (eager: host issue + execution).

    Workflow: 1) add --dry-run to see the grid size and estimated time;
    2) run it (progress and ETA on stderr); 3) if it stops, rerun the
    same command: finished chunks are skipped, no row is written twice;
    4) hand --out to the calibration.

    Needs torch: pip install 'frontier-sim\\[profiler]'.
    """
    try:
        from profiler.cli_entry import ProfileArgs, run_profile
    except ImportError as exc:
        _fail(f"frontier profile needs torch ({exc}); pip install 'frontier-sim[profiler]'")
        return
    args = ProfileArgs(model=model, out=out, tensor_parallel_size=tensor_parallel_size,
                       expert_parallel_size=expert_parallel_size, families=families, device=device, dtype=dtype,
                       gpu=gpu, grid=grid, backend=backend, warmup_ms=warmup_ms, budget_ms=budget_ms,
                       max_chunks=max_chunks, dry_run=dry_run)
    try:
        check_dir_path("--out", out)
        run_profile(args)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
