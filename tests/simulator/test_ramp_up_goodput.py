"""vllm bench serve's ramp-up arrivals and its reporting flags (--goodput, --percentile-metrics,
--metric-percentiles); the arrivals equal vLLM's own generator in tests/oracle/test_ramp_up_oracle.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from frontier.cli import app
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec
from simulator.workloads.arrivals import arrival_times_s, ramp_up_rate

runner = CliRunner()


def test_ramp_up_rates_and_arrivals():
    assert [ramp_up_rate("linear", 2, 10, i, 5) for i in range(5)] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert [ramp_up_rate("exponential", 1, 16, i, 5) for i in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    # burstiness inf: constant gaps 1 / rate, summed, not rescaled
    assert arrival_times_s(4, float("inf"), float("inf"), 0, ("exponential", 1, 8)) == [1.0, 1.5, 1.75, 1.875]
    # Poisson: gamma(1, 1 / rate_i) draws of the legacy generator, in order
    rng = np.random.RandomState(5)
    gaps = [rng.gamma(1.0, 1.0 / r) for r in (1.0, 3.0, 5.0)]
    assert arrival_times_s(3, float("inf"), 1.0, 5, ("linear", 1, 5)) == [gaps[0], gaps[0] + gaps[1],
                                                                           gaps[0] + gaps[1] + gaps[2]]


@pytest.mark.parametrize("kwargs,match", [
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=5, request_rate=3.0), "do not specify"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=1), "both --ramp-up-start-rps and --ramp-up-end-rps"),
    (dict(ramp_up_strategy="cubic", ramp_up_start_rps=1, ramp_up_end_rps=5), "valid: linear, exponential"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=6, ramp_up_end_rps=5), "must not exceed"),
    (dict(ramp_up_strategy="exponential", ramp_up_start_rps=0, ramp_up_end_rps=5), "first request's rate is 0"),
    (dict(ramp_up_start_rps=1, ramp_up_end_rps=5), "need --ramp-up-strategy"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=1.5, ramp_up_end_rps=5), "ramp_up_start_rps=1.5"),
])
def test_ramp_up_flags_are_checked_as_vllm_checks_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WorkloadSpec(**kwargs)


def test_goodput_and_percentiles_in_a_run():
    spec = SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
                          workload=WorkloadSpec(num_prompts=60, request_rate=20.0, random_input_len=500,
                                                random_output_len=30),
                          goodput=(("ttft", 26.0), ("tpot", 8.0)), percentile_metrics=("ttft", "tpot"),
                          metric_percentiles=(50.0, 90.0))
    result = run_simulation(spec)
    s = result.summary
    good = sum(r.first_token_s - r.send_s <= 0.026 and (r.finish_s - r.first_token_s) / (r.output_len - 1) <= 0.008
               for r in result.records)
    assert 0 < good < 60
    assert s["request_goodput"] == good / s["duration"]
    assert {"p50_ttft_ms", "p90_ttft_ms", "p50_tpot_ms", "p90_tpot_ms"} <= set(s)
    assert not {"p99_ttft_ms", "mean_itl_ms", "mean_e2el_ms"} & set(s)
    for bad, match in ((dict(goodput=(("itl", 5.0),)), "--goodput itl:5.0 is invalid"),
                       (dict(percentile_metrics=("ttft", "foo")), "--percentile-metrics ttft,foo"),
                       (dict(metric_percentiles=(100.0,)), "--metric-percentiles")):
        with pytest.raises(ValueError, match=match):
            SimulationSpec(**bad)


def test_cli_flags(tmp_path):
    base = ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--num-prompts", "40",
            "--random-input-len", "200", "--random-output-len", "10"]
    res = runner.invoke(app, base + ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps",
                                     "20", "--goodput", "ttft:100 e2el:1000", "--metric-percentiles", "50,99",
                                     "--save-result", "--result-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "Traffic ramp-up strategy: linear. Will increase RPS from 2 to 20 RPS" in res.output
    assert "Request goodput (req/s):" in res.output and "P50 TTFT (ms):" in res.output
    (saved,) = list(tmp_path.glob("vllm-ramp-up-linear-2qps-20qps-Llama-3.1-8B-*.json"))
    keys = json.loads(saved.read_text())
    assert (keys["ramp_up_strategy"], keys["ramp_up_start_rps"], keys["ramp_up_end_rps"]) == ("linear", 2, 20)
    res = runner.invoke(app, base + ["--goodput", "ttft=100"])
    assert res.exit_code == 2 and "error: --goodput 'ttft=100': give KEY:VALUE pairs" in res.output
