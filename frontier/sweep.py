"""``frontier sweep``: simulate every combination of serve and bench parameters, pick the best under an SLA.

Parameters are given as ``vllm bench sweep serve`` takes them: ``--serve-params`` and
``--bench-params`` are JSON files, each a list of parameter dicts or a dict of named ones
(``{"tp2": {"tensor_parallel_size": 2}, ...}``; a dict's ``_benchmark_name`` key names it too),
keys as the flags of ``frontier simulate`` (underscores or dashes); the runs are their Cartesian
product, each on top of the settings of ``--config`` (a simulate scenario file). vLLM's sweep
runs each combination on a GPU; here each is one simulation.

With ``--workload-var request_rate|max_concurrency`` and ``--workload-iters N`` each combination
is explored over load levels as ``vllm bench sweep serve_workload`` explores it
(``workload_levels``): one run at concurrency 1 (serial), one at concurrency = the number of
prompts (batch), then N - 2 levels spaced evenly between the workload each of those two served
(its request throughput, or for max_concurrency its request throughput x mean E2E latency);
every level is a run of its own, so the SLA picks a combination and its load together.

Every run reports what ``vllm bench serve`` reports, reduced to the columns a deployment choice
turns on (``ROW_COLUMNS``): GPUs, completed / failed requests, mean and the ``--sla-percentile``
TTFT and TPOT, request and output-token throughput, output tokens per second per GPU. With
``--sla-ttft-ms`` / ``--sla-tpot-ms`` a run meets the SLA when that percentile of its TTFT /
TPOT is within the limit and no request failed; the best run is the one that meets it with the
most output tokens per second per GPU (the order of the runs breaks ties). The ``pareto`` column
marks the runs on the frontier of tokens per second per user against per GPU, as ``vllm bench
sweep plot_pareto`` draws it (users: the run's max_concurrency, else its request rate, else its
peak concurrent requests).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

ROW_COLUMNS = ("name", "num_gpus", "completed", "failed", "mean_ttft_ms", "ttft_ms_at_p", "mean_tpot_ms",
               "tpot_ms_at_p", "mean_e2el_ms", "request_throughput", "output_throughput", "output_throughput_per_gpu",
               "output_throughput_per_user", "pareto", "meets_sla", "error")
WORKLOAD_VARS = ("request_rate", "max_concurrency")     # vllm bench sweep serve_workload's --workload-var


@dataclass(frozen=True)
class Combination:
    """One run of a sweep: its name and the simulate keys it sets over the base settings."""

    name: str
    params: dict[str, Any]


def read_params(path: Path | None, flag: str) -> list[Combination]:
    """The parameter combinations of one vLLM-style params file (None: one empty combination).
    ValueError (one line) for a file that is not such a list or dict."""
    if path is None:
        return [Combination("", {})]
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} {str(path)!r} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if isinstance(data, dict):
        if not all(isinstance(params, dict) for params in data.values()):
            raise ValueError(f"{flag} {str(path)!r}: each named entry must be an object of parameters")
        data = [{"_benchmark_name": name, **params} for name, params in data.items()]
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise ValueError(f"{flag} {str(path)!r} must hold a non-empty list of parameter objects or an object of "
                         "named ones, as vllm bench sweep's params files")
    out = []
    for record in data:
        params = {str(k).replace("-", "_"): v for k, v in record.items() if k != "_benchmark_name"}
        name = str(record.get("_benchmark_name") or ",".join(f"{k}={v}" for k, v in params.items()))
        out.append(Combination(name, params))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        twice = sorted(n for n in set(names) if names.count(n) > 1)
        raise ValueError(f"{flag} {str(path)!r}: names must be unique, got {twice}")
    return out


def combinations(serve: list[Combination], bench: list[Combination]) -> list[Combination]:
    """The Cartesian product, serve parameters first (a key in both: the bench file's wins, as the
    bench command line comes after the serve one)."""
    return [Combination(" | ".join(n for n in (s.name, b.name) if n), {**s.params, **b.params})
            for s, b in itertools.product(serve, bench)]


def percentile_ms(values_s: Sequence[float], p: float) -> float:
    """The p-th percentile (numpy's linear) of a list of seconds, in ms; NaN when empty."""
    return float(np.percentile(np.asarray(values_s) * 1e3, p)) if len(values_s) else float("nan")


def error_row(name: str, error: str) -> dict[str, Any]:
    """The row of a run that could not be simulated (its one-line reason)."""
    return {**dict.fromkeys(ROW_COLUMNS, ""), "name": name, "pareto": False, "meets_sla": False, "error": error}


def run_row(spec, name: str, percentile: float) -> dict[str, Any]:
    """Simulate ``spec`` and reduce it to a sweep row (ROW_COLUMNS but meets_sla); a refused
    deployment (ValueError) gives an error row."""
    from simulator.simulation import run_simulation
    try:
        result = run_simulation(spec)
    except ValueError as exc:
        return error_row(name, str(exc))
    recs, s = result.records, result.summary
    ttft = [r.first_token_s - r.send_s for r in recs]
    tpot = [(r.finish_s - r.first_token_s) / (r.output_len - 1) for r in recs if r.output_len > 1]
    gpus = int(s.get("num_gpus") or result.resolved.num_gpus)
    out_tps = float(s.get("output_throughput", 0.0))
    rate = spec.workload.request_rate
    users = spec.max_concurrency or (rate if math.isfinite(rate) else float(s.get("max_concurrent_requests") or 1))
    return {"name": name, "num_gpus": gpus, "completed": int(s.get("completed", 0)), "failed": int(s.get("failed", 0)),
            "mean_ttft_ms": float(s.get("mean_ttft_ms", float("nan"))), "ttft_ms_at_p": percentile_ms(ttft, percentile),
            "mean_tpot_ms": float(s.get("mean_tpot_ms", float("nan"))), "tpot_ms_at_p": percentile_ms(tpot, percentile),
            "mean_e2el_ms": float(s.get("mean_e2el_ms", float("nan"))),
            "request_throughput": float(s.get("request_throughput", 0.0)), "output_throughput": out_tps,
            "output_throughput_per_gpu": out_tps / gpus, "output_throughput_per_user": out_tps / users,
            "pareto": False, "error": ""}


def endpoint_params(var: str, num_prompts: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The serial and batch runs' parameters of a workload exploration (vLLM's: concurrency 1 and
    the number of prompts, the workload variable set to the same value)."""
    return {"max_concurrency": 1, var: 1}, {"max_concurrency": num_prompts, var: num_prompts}


def workload_levels(serial: dict[str, Any], batch: dict[str, Any], var: str, iters: int) -> list[int]:
    """The intermediate load levels of ``vllm bench sweep serve_workload`` between a serial and a
    batch run's rows: the workload each served (request throughput; for max_concurrency times the
    mean E2E latency in s), rounded up / down, ``iters`` points evenly spaced, ends dropped,
    rounded, distinct, sorted."""
    def served(row: dict[str, Any]) -> float:
        rate = float(row["request_throughput"])
        return rate if var == "request_rate" else rate * float(row["mean_e2el_ms"]) / 1000

    low, high = math.ceil(served(serial)), math.floor(served(batch))
    return sorted(set(map(round, np.linspace(low, high, iters)[1:-1])))


def meets_sla(row: dict[str, Any], ttft_ms: float | None, tpot_ms: float | None) -> bool:
    """Whether a finished run meets the limits (None: no limit) with no failed request; NaN
    percentiles (no request to measure) do not."""
    if row["error"] or row["failed"] or not row["completed"]:
        return False
    return ((ttft_ms is None or row["ttft_ms_at_p"] <= ttft_ms)
            and (tpot_ms is None or row["tpot_ms_at_p"] <= tpot_ms))


def mark_pareto(rows: list[dict[str, Any]], epsilon: float = 1e-9) -> None:
    """Set ``pareto`` on the runs of the frontier of tokens/s per user (x) against per GPU (y):
    vLLM's ``_pareto_frontier`` (x descending, then y; a run is kept when its y is at least the
    best y of the runs before it). Runs that did not complete are left off."""
    done = [r for r in rows if not r["error"] and r["completed"]]
    best = -math.inf
    for row in sorted(done, key=lambda r: (r["output_throughput_per_user"], r["output_throughput_per_gpu"]),
                      reverse=True):
        y = row["output_throughput_per_gpu"]
        row["pareto"] = y >= best - epsilon
        best = max(best, y)


def best_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run meeting the SLA with the most output tokens per second per GPU (first on ties)."""
    ok = [r for r in rows if r["meets_sla"]]
    return max(ok, key=lambda r: r["output_throughput_per_gpu"]) if ok else None


@dataclass(frozen=True)
class Sla:
    """The limits a run must meet: the ``percentile`` of TTFT and of TPOT (ms; None: no limit)."""

    percentile: float = 99.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None


def run_sweep(specs: list[tuple[str, Any]], sla: Sla, jobs: int, continue_on_error: bool,
              on_row: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Rows of ``specs`` ((name, SimulationSpec or an error text) pairs) in their order, simulated
    in ``jobs`` processes (1: in this one), each marked with whether it meets ``sla``;
    ``on_row`` sees each row as it comes, in order. A run that cannot be simulated stops the
    sweep with a ValueError naming it, unless ``continue_on_error`` (then it is an error row)."""
    def finish(row: dict[str, Any]) -> dict[str, Any]:
        if row["error"] and not continue_on_error:
            raise ValueError(f"run {row['name']!r}: {row['error']} (--continue-on-error records it and goes on)")
        row["meets_sla"] = meets_sla(row, sla.ttft_ms, sla.tpot_ms)
        on_row(row)
        return row

    if jobs == 1:
        return [finish(error_row(name, spec) if isinstance(spec, str) else run_row(spec, name, sla.percentile))
                for name, spec in specs]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [None if isinstance(spec, str) else pool.submit(run_row, spec, name, sla.percentile)
                   for name, spec in specs]
        return [finish(error_row(name, spec) if future is None else future.result())
                for (name, spec), future in zip(specs, futures)]


def write_csv(rows: list[dict[str, Any]], params: list[dict[str, Any]], path: Path) -> Path:
    """One CSV row per run: its parameters (a column per key any run sets), then ROW_COLUMNS."""
    keys = sorted({k for p in params for k in p})
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*keys, *ROW_COLUMNS])
        for row, p in zip(rows, params):
            writer.writerow([json.dumps(p[k]) if k in p else "" for k in keys] + [row.get(c, "") for c in ROW_COLUMNS])
    return path


def format_row(row: dict[str, Any], percentile: float) -> str:
    """One printed line of a run."""
    if row["error"]:
        return f"{row['name']:<40} error: {row['error']}"
    p = f"p{percentile:g}"
    return (f"{row['name']:<40} {row['num_gpus']:>4} GPUs  TTFT {p} {row['ttft_ms_at_p']:9.1f} ms  "
            f"TPOT {p} {row['tpot_ms_at_p']:7.2f} ms  {row['output_throughput']:9.1f} tok/s  "
            f"{row['output_throughput_per_gpu']:8.1f} tok/s/GPU  {'meets SLA' if row['meets_sla'] else '-'}")


def explore_workloads(runs: list[Combination], base: list[tuple[str, Any]], spec_of: Callable, var: str, iters: int,
                      sla: Sla, jobs: int, continue_on_error: bool,
                      on_row: Callable[[dict[str, Any]], None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``--workload-var``: every combination's serial and batch runs, then the load levels between
    them (``workload_levels``); ``base``: each combination's (name, spec), ``spec_of(name, params)``
    builds a run's. Returns (rows, their parameters), each combination's runs together in load
    order."""
    first, first_params = [], []
    for run, (name, spec) in zip(runs, base):
        num_prompts = spec.workload.num_prompts if not isinstance(spec, str) else 1
        for label, extra in zip(("serial", "batch"), endpoint_params(var, num_prompts)):
            first_params.append({**run.params, **extra})
            first.append(spec_of(f"{name} | {label}" if name else label, first_params[-1]))
    ends = run_sweep(first, sla, jobs, continue_on_error, on_row)
    levels = [[] if serial["error"] or batch["error"] else workload_levels(serial, batch, var, iters)
              for serial, batch in zip(ends[::2], ends[1::2])]
    middle, middle_params = [], []
    for run, values in zip(runs, levels):
        for value in values:
            middle_params.append({**run.params, var: value})
            middle.append(spec_of(f"{run.name} | {var}={value}" if run.name else f"{var}={value}", middle_params[-1]))
    mids, mid_params = iter(run_sweep(middle, sla, jobs, continue_on_error, on_row)), iter(middle_params)
    rows, params = [], []
    for i, values in enumerate(levels):
        rows += [ends[2 * i], *[next(mids) for _ in values], ends[2 * i + 1]]
        params += [first_params[2 * i], *[next(mid_params) for _ in values], first_params[2 * i + 1]]
    return rows, params
