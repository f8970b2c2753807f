"""``frontier sweep``: vLLM-style params files, their product, the SLA filter, the best run, sweep.csv."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from frontier.sweep import (Combination, best_row, combinations, endpoint_params, error_row, mark_pareto, meets_sla,
                            read_params, workload_levels)

runner = CliRunner()
BASE = ("model: meta-llama/Llama-3.1-8B\ngpu: H100\nnum_prompts: 40\nrandom_input_len: 500\nrandom_output_len: 50\n"
        "max_model_len: 4096\n")


def _write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_params_files_read_as_vllm_bench_sweep_reads_them(tmp_path):
    named = read_params(_write(tmp_path, "a.json", {"tp2": {"tensor-parallel-size": 2},
                                                     "tp4": {"tensor_parallel_size": 4}}), "--serve-params")
    assert named == [Combination("tp2", {"tensor_parallel_size": 2}), Combination("tp4", {"tensor_parallel_size": 4})]
    listed = read_params(_write(tmp_path, "b.json", [{"max_concurrency": 8}, {"_benchmark_name": "wide",
                                                                            "max_concurrency": 64}]), "--bench-params")
    assert listed == [Combination("max_concurrency=8", {"max_concurrency": 8}),
                      Combination("wide", {"max_concurrency": 64})]
    runs = combinations(named, listed)
    assert [r.name for r in runs] == ["tp2 | max_concurrency=8", "tp2 | wide", "tp4 | max_concurrency=8", "tp4 | wide"]
    assert runs[3].params == {"tensor_parallel_size": 4, "max_concurrency": 64}
    assert read_params(None, "--bench-params") == [Combination("", {})]
    for data, message in (("[1", "is not valid JSON"), ([], "non-empty list"), ({"a": 1}, "must be an object"),
                          ([{"a": 1}, {"a": 1}], "names must be unique")):
        with pytest.raises(ValueError, match=message):
            read_params(_write(tmp_path, "bad.json", data), "--serve-params")


def _row(name, per_gpu, ttft, tpot, failed=0):
    return {**error_row(name, ""), "completed": 10, "failed": failed, "ttft_ms_at_p": ttft, "tpot_ms_at_p": tpot,
            "output_throughput_per_gpu": per_gpu}


def test_the_best_run_meets_the_sla_with_the_most_tokens_per_gpu():
    rows = [_row("a", 900.0, 100.0, 10.0), _row("b", 1200.0, 300.0, 10.0), _row("c", 1500.0, 100.0, 10.0, failed=1),
            _row("d", 1100.0, 150.0, 20.0), {**error_row("e", "tp=3 must divide ...")}]
    for row in rows:
        row["meets_sla"] = meets_sla(row, 200.0, 15.0)
    assert [r["meets_sla"] for r in rows] == [True, False, False, False, False]
    assert best_row(rows)["name"] == "a"
    for row in rows:
        row["meets_sla"] = meets_sla(row, None, 25.0)
    assert best_row(rows)["name"] == "b"     # 1200 tok/s/GPU; c failed a request, e did not run


def test_a_sweep_runs_every_combination_and_writes_sweep_csv(tmp_path):
    args = ["sweep", "--config", _write(tmp_path, "base.yaml", BASE),
            "--serve-params", _write(tmp_path, "serve.json", {"tp1": {"tensor_parallel_size": 1},
                                                              "tp2": {"tensor_parallel_size": 2}}),
            "--bench-params", _write(tmp_path, "bench.json", [{"max_concurrency": 4}, {"max_concurrency": 16}]),
            "--sla-tpot-ms", "1000", "-o", str(tmp_path / "out")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    with open(tmp_path / "out" / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == ["tp1 | max_concurrency=4", "tp1 | max_concurrency=16",
                                         "tp2 | max_concurrency=4", "tp2 | max_concurrency=16"]
    assert [r["tensor_parallel_size"] for r in rows] == ["1", "1", "2", "2"]
    assert [int(r["num_gpus"]) for r in rows] == [1, 1, 2, 2] and {r["completed"] for r in rows} == {"40"}
    for r in rows:
        assert float(r["output_throughput_per_gpu"]) == pytest.approx(float(r["output_throughput"]) / int(r["num_gpus"]))
    best = max(rows, key=lambda r: float(r["output_throughput_per_gpu"]))
    assert f"best under TPOT p99 <= 1000 ms: {best['name']}" in res.output
    parallel = runner.invoke(app, args[:-2] + ["--jobs", "2", "-o", str(tmp_path / "out2")])
    assert parallel.exit_code == 0, parallel.output
    with open(tmp_path / "out2" / "sweep.csv") as f:
        assert list(csv.DictReader(f)) == rows      # the same simulations in other processes


def test_a_run_that_cannot_be_simulated_stops_the_sweep_unless_asked_to_go_on(tmp_path):
    args = ["sweep", "--config", _write(tmp_path, "base.yaml", BASE),
            "--serve-params", _write(tmp_path, "s.json", [{"tensor_parallel_size": 3}, {"tensor_parallel_size": 1}])]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert res.output.strip() == ("error: run 'tensor_parallel_size=3': tp=3 must divide num_attention_heads=32 of "
                                  "meta-llama/Llama-3.1-8B (--continue-on-error records it and goes on)")
    res = runner.invoke(app, args + ["--continue-on-error"])
    assert res.exit_code == 0 and "error: tp=3 must divide" in res.output
    assert "best (no SLA given): tensor_parallel_size=1" in res.output
    res = runner.invoke(app, ["sweep", "--serve-params", _write(tmp_path, "o.json", [{"batch_trace": "x"}])])
    assert res.exit_code == 2 and "'batch_trace' is not a parameter a sweep can vary" in res.output
    res = runner.invoke(app, ["sweep", "--serve-params", _write(tmp_path, "d.json", {"a": {"max_num_seqs": 4}}),
                              "--dry-run"])
    assert res.exit_code == 0 and res.output.splitlines() == ['a: {"max_num_seqs": 4}',
                                                              "1 run(s); nothing simulated (--dry-run)"]


def test_load_levels_are_vllms_workload_explorer_levels():
    serial = {**error_row("s", ""), "request_throughput": 2.4, "mean_e2el_ms": 500.0}
    batch = {**error_row("b", ""), "request_throughput": 30.6, "mean_e2el_ms": 4000.0}
    # request rate: ceil(2.4) = 3 .. floor(30.6) = 30 in 6 levels, the ends dropped
    assert workload_levels(serial, batch, "request_rate", 6) == [8, 14, 19, 25]
    # concurrency: throughput x mean latency = 1.2 -> 2 .. 122.4 -> 122
    assert workload_levels(serial, batch, "max_concurrency", 4) == [42, 82]
    assert workload_levels(serial, batch, "request_rate", 2) == []
    assert endpoint_params("request_rate", 200) == ({"max_concurrency": 1, "request_rate": 1},
                                                   {"max_concurrency": 200, "request_rate": 200})


def test_a_workload_sweep_runs_serial_levels_and_batch_per_combination(tmp_path):
    args = ["sweep", "--config", _write(tmp_path, "base.yaml", BASE), "--workload-var", "request_rate",
            "--workload-iters", "4", "--sla-ttft-ms", "500", "-o", str(tmp_path / "out")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    with open(tmp_path / "out" / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    names = [r["name"] for r in rows]
    assert names[0] == "serial" and names[-1] == "batch" and len(names) == 4
    assert [r["request_rate"] for r in rows] == ["1", *[n.split("=")[1] for n in names[1:3]], "40"]
    assert [r["max_concurrency"] for r in rows] == ["1", "", "", "40"]
    rates = [float(r["request_throughput"]) for r in rows]
    assert rates == sorted(rates)       # more load, more throughput
    bad = runner.invoke(app, args + ["--bench-params", _write(tmp_path, "b.json", [{"request_rate": 5}])])
    assert bad.exit_code == 2 and "sets 'request_rate', which --workload-var request_rate explores" in bad.output
    bad = runner.invoke(app, ["sweep", "--workload-var", "num_prompts"])
    assert bad.exit_code == 2 and "--workload-var 'num_prompts' is not one of request_rate, max_concurrency" in bad.output


def test_the_pareto_frontier_is_vllms_per_user_against_per_gpu():
    def row(name, per_user, per_gpu):
        return {**error_row(name, ""), "completed": 1, "output_throughput_per_user": per_user,
                "output_throughput_per_gpu": per_gpu}
    rows = [row("a", 100.0, 500.0), row("b", 80.0, 900.0), row("c", 60.0, 800.0), row("d", 40.0, 1500.0),
            row("e", 100.0, 400.0), {**error_row("f", "refused")}]
    mark_pareto(rows)
    # x descending: a (y 500) kept, e (100, 400) below a's 500, b kept, c below 900, d kept
    assert [r["pareto"] for r in rows] == [True, True, False, True, False, False]
