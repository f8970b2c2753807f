"""The ``frontier`` command line. Flag names follow ``vllm serve`` and ``vllm bench serve``.

Every option defaults to ``None`` here so that three sources can be merged in
a fixed order: an explicit flag wins over the scenario file (``--config``),
which wins over vLLM's defaults (held by the frozen configs themselves).
Errors in user input are printed as one line and exit with status 2.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Frontier: simulate LLM serving deployments on a CPU, faithfully to vLLM.")

ENGINE_HELP = "Engine (vllm serve flags)"
BENCH_HELP = "Workload (vllm bench serve flags)"
OUT_HELP = "Outputs"


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _merge(cli: dict[str, Any], config: Optional[Path], valid: tuple[str, ...]) -> dict[str, Any]:
    from frontier.scenario import load_scenario
    merged = load_scenario(config, valid) if config is not None else {}
    merged.update({k: v for k, v in cli.items() if v is not None})
    return merged


def _pick(cls, values: dict[str, Any]):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


@app.command()
def simulate(
    config: Optional[Path] = typer.Option(None, "--config", help="Scenario YAML with the same settings as the flags (flags win)."),
    model: Optional[str] = typer.Option(None, help="HF config.json path/folder or catalogue name, e.g. meta-llama/Llama-3.1-8B.", rich_help_panel=ENGINE_HELP),
    gpu: Optional[str] = typer.Option(None, help="GPU type, e.g. H100, H200, A100-80GB (see `frontier gpus`).", rich_help_panel=ENGINE_HELP),
    tensor_parallel_size: Optional[int] = typer.Option(None, "--tensor-parallel-size", "-tp", rich_help_panel=ENGINE_HELP),
    pipeline_parallel_size: Optional[int] = typer.Option(None, "--pipeline-parallel-size", "-pp", rich_help_panel=ENGINE_HELP),
    data_parallel_size: Optional[int] = typer.Option(None, "--data-parallel-size", "-dp", help="DP ranks; each runs its own scheduler and KV cache.", rich_help_panel=ENGINE_HELP),
    enable_expert_parallel: Optional[bool] = typer.Option(None, "--enable-expert-parallel/--no-enable-expert-parallel", rich_help_panel=ENGINE_HELP),
    num_replicas: Optional[int] = typer.Option(None, help="Independent engine replicas behind the router.", rich_help_panel=ENGINE_HELP),
    router: Optional[str] = typer.Option(None, help="round_robin (default) or least_loaded.", rich_help_panel=ENGINE_HELP),
    max_num_seqs: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    max_num_batched_tokens: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    max_model_len: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    block_size: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    gpu_memory_utilization: Optional[float] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    num_gpu_blocks_override: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    enable_prefix_caching: Optional[bool] = typer.Option(None, "--enable-prefix-caching/--no-enable-prefix-caching", rich_help_panel=ENGINE_HELP),
    long_prefill_token_threshold: Optional[int] = typer.Option(None, rich_help_panel=ENGINE_HELP),
    enforce_eager: Optional[bool] = typer.Option(None, "--enforce-eager/--no-enforce-eager", rich_help_panel=ENGINE_HELP),
    async_scheduling: Optional[bool] = typer.Option(None, "--async-scheduling/--no-async-scheduling", rich_help_panel=ENGINE_HELP),
    scheduling_policy: Optional[str] = typer.Option(None, help="fcfs (default) or priority.", rich_help_panel=ENGINE_HELP),
    dataset_name: Optional[str] = typer.Option(None, help="random (default), sharegpt or trace.", rich_help_panel=BENCH_HELP),
    dataset_path: Optional[str] = typer.Option(None, help="Trace file (.jsonl/.csv/.parquet) or a ShareGPT JSON.", rich_help_panel=BENCH_HELP),
    num_prompts: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    request_rate: Optional[float] = typer.Option(None, help="Requests per second; inf (default) sends all at t=0.", rich_help_panel=BENCH_HELP),
    burstiness: Optional[float] = typer.Option(None, rich_help_panel=BENCH_HELP),
    max_concurrency: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    seed: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_input_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_output_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_range_ratio: Optional[float] = typer.Option(None, rich_help_panel=BENCH_HELP),
    random_prefix_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    sharegpt_output_len: Optional[int] = typer.Option(None, rich_help_panel=BENCH_HELP),
    output_dir: Optional[Path] = typer.Option(None, help="Write requests.parquet, steps.parquet and summary.json here.", rich_help_panel=OUT_HELP),
    batch_trace: Optional[Path] = typer.Option(None, help="Parquet: one row per scheduled request per step.", rich_help_panel=OUT_HELP),
    save_result: Optional[bool] = typer.Option(None, "--save-result/--no-save-result", help="Write the vllm bench serve result JSON.", rich_help_panel=OUT_HELP),
    result_dir: Optional[Path] = typer.Option(None, rich_help_panel=OUT_HELP),
    result_filename: Optional[str] = typer.Option(None, rich_help_panel=OUT_HELP),
    debug: Optional[bool] = typer.Option(None, "--debug/--no-debug", help="Check scheduler and KV invariants on every step.", rich_help_panel=OUT_HELP),
    step_jitter: Optional[float] = typer.Option(None, help="Relative std-dev of seeded per-step time noise (default 0).", rich_help_panel=ENGINE_HELP),
) -> None:
    """Simulate a vLLM deployment serving a benchmark workload and print vllm bench serve's summary."""
    from simulator.engine_args import EngineArgs
    from simulator.output import write_outputs
    from simulator.simulation import SimulationSpec, run_simulation
    from simulator.workload import WorkloadSpec
    from simulator.metrics import format_summary

    cli = dict(locals())
    cli.pop("config")
    out_keys = ("output_dir", "batch_trace", "save_result", "result_dir", "result_filename", "debug",
                "max_concurrency", "step_jitter")
    valid = EngineArgs.field_names() + tuple(f.name for f in fields(WorkloadSpec)) + out_keys
    try:
        values = _merge({k: cli[k] for k in valid if k in cli}, config, valid)
        if isinstance(values.get("request_rate"), str):
            values["request_rate"] = float(values["request_rate"])
        spec = SimulationSpec(
            engine=_pick(EngineArgs, values), workload=_pick(WorkloadSpec, values),
            max_concurrency=values.get("max_concurrency"),
            keep_batch_trace=values.get("batch_trace") is not None,
            debug=bool(values.get("debug", False)),
            step_jitter=float(values.get("step_jitter", 0.0)))
        result = run_simulation(spec)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    r = result.resolved
    typer.echo(f"Simulated {r.model.name} on {r.num_gpus} x {r.gpu.name} "
               f"({r.num_engines} engine(s) of TP{r.parallel.tp} x PP{r.parallel.pp}); "
               f"KV cache {result.memory.num_gpu_blocks} blocks x {r.block_size} tokens per engine; "
               f"cost model: roofline")
    if result.failed:
        first = next(iter(result.failed.items()))
        typer.echo(f"warning: {len(result.failed)} request(s) failed, e.g. {first[0]}: {first[1]}", err=True)
    if result.summary.get("completed"):
        typer.echo(format_summary(result.summary))
    typer.echo(f"{'Simulated duration (s):':<40} {result.simulated_duration_s:<10.2f}")
    typer.echo(f"{'Simulation wall time (s):':<40} {result.sim_wall_s:<10.3f}")
    for path in write_outputs(result, values):
        typer.echo(f"wrote {path}")


@app.command()
def memory(
    model: str = typer.Option("meta-llama/Llama-3.1-8B", help="HF config.json path/folder or catalogue name."),
    gpu: str = typer.Option("H100", help="GPU type."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp"),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel/--no-enable-expert-parallel"),
    max_num_seqs: Optional[int] = typer.Option(None),
    max_num_batched_tokens: Optional[int] = typer.Option(None),
    max_model_len: Optional[int] = typer.Option(None),
    block_size: Optional[int] = typer.Option(None),
    gpu_memory_utilization: float = typer.Option(0.92),
    num_gpu_blocks_override: Optional[int] = typer.Option(None),
    enforce_eager: bool = typer.Option(False, "--enforce-eager/--no-enforce-eager"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object for machines."),
) -> None:
    """Print the KV-cache budget breakdown of one GPU rank, by vLLM 0.33's formula."""
    from simulator.engine_args import EngineArgs
    from simulator.simulation import build_memory, resolve_engine

    try:
        args = EngineArgs(
            model=model, gpu=gpu, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
            enable_expert_parallel=enable_expert_parallel, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
            block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
            num_gpu_blocks_override=num_gpu_blocks_override, enforce_eager=enforce_eager)
        resolved = resolve_engine(args)
        budget = build_memory(resolved)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    gib = 1 << 30
    report = {
        "model": resolved.model.name, "gpu": resolved.gpu.name,
        "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
        "data_parallel_size": data_parallel_size,
        "gpu_memory_utilization": gpu_memory_utilization,
        "total_gib": resolved.gpu.memory_bytes / gib,
        "requested_gib": budget.requested_bytes / gib,
        "weights_gib": budget.weights_bytes / gib,
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
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"{report['model']} on {report['gpu']} (TP{tensor_parallel_size} PP{pipeline_parallel_size}), "
               f"per GPU, vLLM 0.33 formula:")
    for key in ("total_gib", "requested_gib", "weights_gib", "activation_gib", "non_torch_gib",
                "cuda_graph_gib", "kv_cache_gib"):
        typer.echo(f"  {key[:-4].replace('_', ' '):<28} {report[key]:>10.2f} GiB")
    typer.echo(f"  {'num_gpu_blocks':<28} {report['num_gpu_blocks']:>10}")
    typer.echo(f"GPU KV cache size: {report['kv_cache_tokens']:,} tokens")
    typer.echo(f"Maximum concurrency for {report['max_model_len']:,} tokens per request: "
               f"{report['max_concurrency']:.2f}x")


@app.command()
def gpus() -> None:
    """List the GPU catalogue."""
    from frontier.gpu import get_gpu, list_gpus
    for name in list_gpus():
        g = get_gpu(name)
        typer.echo(f"{g.name:<12} {g.memory_bytes / (1 << 30):7.1f} GiB  {g.hbm_bw_bytes_per_s / 1e12:5.2f} TB/s  "
                   f"bf16 {g.bf16_flops / 1e12:7.1f} TFLOP/s  ${g.price_per_hour_usd:.2f}/h")


@app.command("import-profiles")
def import_profiles(
    source: str = typer.Option(..., "--source", help="aiconfigurator or vidur."),
    path: Optional[Path] = typer.Option(None, "--path", help="Data folder (aiconfigurator: systems/ or its parent; default the installed aiconfigurator_core). Required for vidur."),
    out: Path = typer.Option(..., "--out", help="Profile root to write (hive family=/gpu= folders)."),
    gpu: Optional[list[str]] = typer.Option(None, "--gpu", help="aiconfigurator only: AIC or catalogue GPU name; repeatable."),
    family: Optional[list[str]] = typer.Option(None, "--family", help="aiconfigurator only: linear, attention, moe, comm; repeatable."),
    version: Optional[str] = typer.Option(None, "--version", help="aiconfigurator only: vLLM version folder (default: current)."),
) -> None:
    """Import public measured profiles (AIConfigurator perf DB, Vidur CSVs) into the profile schema."""
    try:
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
    for g, fams in sorted(report.rows_by_gpu.items()):
        typer.echo(f"{g:<12} " + "  ".join(f"{f} {n:,}" for f, n in sorted(fams.items())))
    typer.echo(f"total: {sum(report.rows.values()):,} rows -> {out}")
    for line in report.skipped:
        typer.echo(f"skipped: {line}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
