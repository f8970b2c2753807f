"""Files a simulation writes: the vLLM benchmark result JSON, the batch trace and tables.

* ``--save-result`` (+ ``--result-dir``, ``--result-filename``): the JSON of
  ``vllm bench serve --save-result``, named as vLLM names it
  (``vllm-{rate}qps[-concurrency{N}]-{model base name}-{YYYYmmdd-HHMMSS}.json``),
  plus ``simulated_duration_s`` and ``sim_wall_s``.
* ``--batch-trace PATH``: Parquet, one row per scheduled request per step.
* ``--perfetto PATH``: Chrome trace-event JSON of the steps (and P/D KV transfers), for
  ui.perfetto.dev (``simulator.perfetto``).
* ``--output-dir DIR``: ``requests.parquet`` (one row per request),
  ``steps.parquet`` (one row per step, with KV blocks in use over time),
  ``roles.parquet`` (per role and time bin: busy fraction and mean batch size,
  ``simulator.role_stats``) and ``summary.json`` (the same dict as the result JSON).

Every file is written to a temporary name and renamed, so a crash never
leaves half a file behind.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from frontier.out_path import check_dir_path, check_file_path
from simulator.trace import write_parquet


def _write_json(obj: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=float) + "\n")
    os.replace(tmp, path)
    return path


def requests_table(result) -> pa.Table:
    """One row per request: what the client saw, plus preemptions and prefix hits."""
    recs = result.records
    rows: dict[str, list] = {
        "request_id": [r.request_id for r in recs],
        "arrival_s": [r.arrival_s for r in recs],
        "send_s": [r.send_s for r in recs],
        "first_token_s": [r.first_token_s for r in recs],
        "finish_s": [r.finish_s for r in recs],
        "prompt_len": [r.prompt_len for r in recs],
        "output_len": [r.output_len for r in recs],
        "ttft_s": [r.first_token_s - r.send_s for r in recs],
        "tpot_s": [(r.finish_s - r.first_token_s) / (r.output_len - 1) if r.output_len > 1 else 0.0
                   for r in recs],
        "e2e_s": [r.finish_s - r.send_s for r in recs],
        "num_preemptions": [r.num_preemptions for r in recs],
        "num_prefix_hit_tokens": [r.num_prefix_hit_tokens for r in recs],
        "itl_s": [[b - a for a, b in zip(r.token_times_s, r.token_times_s[1:])] for r in recs],
    }
    if any(r.image_tokens for r in recs):            # images: their prompt tokens beyond the text
        rows["image_tokens"] = [r.image_tokens for r in recs]
    if any(r.lora_id for r in recs):                 # LoRA adapters: which one each request ran
        rows["lora_id"] = [r.lora_id for r in recs]
    if any(r.decode_replica >= 0 for r in recs):     # P/D disaggregation
        rows["prefill_replica"] = [r.prefill_replica for r in recs]
        rows["decode_replica"] = [r.decode_replica for r in recs]
        rows["kv_transfer_s"] = [r.kv_transfer_s for r in recs]
    return pa.table(rows)


def result_filename(values: dict[str, Any], model_id: str, now: datetime | None = None) -> str:
    """vLLM's ``compute_result_filename`` for the benchmark's ``--save-result``."""
    if values.get("result_filename"):
        return str(values["result_filename"])
    rate = values.get("request_rate", math.inf)
    rate_str = "inf" if rate is None or float(rate) == math.inf else str(float(rate))
    mc = values.get("max_concurrency")
    mc_str = f"-concurrency{mc}" if mc is not None else ""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    if values.get("ramp_up_strategy") is not None:
        rate_str = (f"ramp-up-{values['ramp_up_strategy']}-{values.get('ramp_up_start_rps')}qps-"
                    f"{values.get('ramp_up_end_rps')}")
    return f"vllm-{rate_str}qps{mc_str}-{model_id.split('/')[-1]}-{stamp}.json"


def check_output_paths(values: dict[str, Any]) -> None:
    """ValueError (one line) for an output option ``write_outputs`` could not write, checked
    before the simulation runs (``frontier.out_path``): the folders ``--output-dir`` and, with
    ``--save-result``, ``--result-dir``; the files ``--batch-trace``, ``--perfetto`` and a named
    result file. Creates nothing."""
    save = bool(values.get("save_result"))
    if values.get("output_dir") is not None:
        check_dir_path("--output-dir", values["output_dir"])
    if save:
        result_dir = values.get("result_dir") or "."
        check_dir_path("--result-dir", result_dir)
        if values.get("result_filename"):
            check_file_path("--result-filename", Path(result_dir) / str(values["result_filename"]))
    for flag, key in (("--batch-trace", "batch_trace"), ("--perfetto", "perfetto")):
        if values.get(key) is not None:
            check_file_path(flag, values[key])


def write_outputs(result, values: dict[str, Any]) -> list[Path]:
    """Write the files the options in ``values`` ask for; return their paths."""
    written: list[Path] = []
    summary = dict(result.summary)
    if values.get("save_result"):
        now = datetime.now()
        summary["date"] = now.strftime("%Y%m%d-%H%M%S")
        name = result_filename(values, result.resolved.args.model, now)
        written.append(_write_json(summary, Path(values.get("result_dir") or ".") / name))
    if values.get("batch_trace") is not None:
        written.append(write_parquet(result.trace.requests_table(), values["batch_trace"]))
    timeline = None             # per role and time bin: roles.parquet and Perfetto's counters
    if result.role_engines and (values.get("perfetto") is not None or values.get("output_dir") is not None):
        from simulator.role_stats import role_timeline
        timeline = role_timeline(result.trace.step_cols, result.role_engines, result.simulated_duration_s)
    if values.get("perfetto") is not None:
        from simulator.perfetto import write_perfetto
        written.append(write_perfetto(result, values["perfetto"], timeline))
    if values.get("output_dir") is not None:
        out = Path(values["output_dir"])
        written.append(write_parquet(requests_table(result), out / "requests.parquet"))
        written.append(write_parquet(result.trace.steps_table(), out / "steps.parquet"))
        if timeline is not None:
            written.append(write_parquet(pa.table(timeline), out / "roles.parquet"))
        written.append(_write_json(summary, out / "summary.json"))
    return written
