"""--frontend-latency-ms: the time from a send to the request reaching the engines."""

import pytest

from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def _run(latency_s: float, version: str = "0.33.0", concurrency: int | None = None, prompts: int = 1):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", vllm_version=version),
        workload=WorkloadSpec(dataset_name="random", num_prompts=prompts, random_input_len=256,
                              random_output_len=8, random_range_ratio=0.0, seed=0),
        max_concurrency=concurrency, frontend_latency_s=latency_s, keep_batch_trace=True))


def test_one_request_waits_the_latency_before_its_first_step():
    base, late = _run(0.0), _run(0.002)
    assert late.summary["mean_ttft_ms"] - base.summary["mean_ttft_ms"] == pytest.approx(2.0, abs=1e-9)
    assert late.summary["mean_tpot_ms"] == pytest.approx(base.summary["mean_tpot_ms"], abs=1e-12)
    assert late.trace.steps_table().column("start_s").to_pylist()[0] == pytest.approx(0.002)


def test_requests_sent_at_a_finish_reach_the_engine_after_it():
    """Synchronous scheduling (0.12), one request at a time: the client sends the next request when
    the previous one finishes; it reaches the engine 1 ms later, so every TTFT grows by 1 ms and
    every send comes 1 ms later than the one before it did without the latency."""
    base, late = _run(0.0, "0.12.0", 1, 3), _run(0.001, "0.12.0", 1, 3)
    b, lt = (sorted(r.records, key=lambda x: x.send_s) for r in (base, late))
    assert [x.send_s for x in lt] == pytest.approx([x.send_s + 0.001 * i for i, x in enumerate(b)])
    assert late.summary["mean_ttft_ms"] - base.summary["mean_ttft_ms"] == pytest.approx(1.0, abs=1e-9)


def test_the_default_is_one_millisecond():
    assert SimulationSpec().frontend_latency_s == 0.001 == _run(0.001).summary["frontend_latency_ms"] / 1e3


def test_bad_latency_is_refused():
    with pytest.raises(ValueError, match=r"--frontend-latency-ms must be in \[0, 60000\), got -1.0"):
        SimulationSpec(frontend_latency_s=-0.001)
