"""AFD end to end with fixed step costs: request timestamps derived by hand.

The AFD step itself (lanes ping-ponging between A and F) is checked against hand-computed
timelines in test_afd.py; here every prefill step costs 10 ms and every attention-role step
5 ms, so what is left is the control flow: P prefill -> KV pull P -> A -> A's 1-token step
(first token) -> decode steps, as in test_pdd.py's PDD timelines.
"""

import pytest

from simulator.afd import AfdEngine, AfdSpec, AfdStepStats
from simulator.batch_engine import BatchEngine, StepCost
from simulator.control_plane import PddSpec
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec

KV_BYTES_PER_TOKEN = 48 * 2 * 4 * 128 * 2      # Qwen3-30B-A3B: layers x (K, V) x KV heads x head dim x bf16
BW, LAT = 1e9, 0.001                           # KV link: 1 GB/s, 1 ms


def _fixed(monkeypatch):
    def prefill_cost(self, batch):
        n = sum(batch.new_tokens)
        return StepCost(0.010, n, n, "NONE")

    def attention_cost(self, batch):
        self.stats.append(AfdStepStats(0.005, 0.0, 0.0, 0.0, 1))
        n = sum(batch.new_tokens)
        return StepCost(0.005, n, n, "NONE")

    monkeypatch.setattr(BatchEngine, "step_cost", prefill_cost)
    monkeypatch.setattr(AfdEngine, "step_cost", attention_cost)


def _run(prompts, async_scheduling, rate=float("inf")):
    spec = SimulationSpec(
        engine=EngineArgs(model="Qwen/Qwen3-30B-A3B", gpu="H100", max_model_len=4096,
                          async_scheduling=async_scheduling),
        workload=WorkloadSpec(dataset_name="random", num_prompts=prompts, random_input_len=32,
                              random_output_len=3, random_range_ratio=0.0, request_rate=rate, seed=0),
        keep_batch_trace=True, architecture="afd", afd=AfdSpec(),
        pdd=PddSpec(kv_transfer_bandwidth_bytes_per_s=BW, kv_transfer_latency_s=LAT),
        frontend_latency_s=0.0)    # the timelines below start at the send
    return run_simulation(spec)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_one_request(monkeypatch, async_scheduling):
    # P step [0, 10 ms]; pull 10 -> 10 + 1 + 32 x 98,304 B / 1 GB/s = 14.145728 ms; A's 1-token
    # step [14.145728, 19.145728] = first token; decodes end at 24.145728 and 29.145728 ms.
    _fixed(monkeypatch)
    res = _run(1, async_scheduling)
    (r,) = res.records
    pull = LAT + 32 * KV_BYTES_PER_TOKEN / BW
    assert r.kv_transfer_s == pytest.approx(pull, abs=1e-12)
    assert list(r.token_times_s) == pytest.approx([0.010 + pull + 0.005 * k for k in (1, 2, 3)], abs=1e-12)
    steps = res.trace.step_cols
    assert steps["role"] == ["P", "A", "A", "A"]
    assert steps["start_s"] == pytest.approx([0.0, 0.010 + pull, 0.015 + pull, 0.020 + pull], abs=1e-12)
    assert steps["num_tokens"] == [32, 1, 1, 1]
    assert res.summary["prefill_num_steps"] == 1 and res.summary["attention_num_steps"] == 3


def test_two_requests_share_one_prefill_step_and_the_kv_link(monkeypatch):
    # Both prompts in one P step [0, 10]; both pulled over one link from 10 ms, at 0.5 GB/s each:
    # 1 + 6.291456 ms -> both land at 17.291456 ms; one A step [17.29, 22.29] gives both first tokens.
    _fixed(monkeypatch)
    res = _run(2, async_scheduling=False)
    pull = LAT + 2 * 32 * KV_BYTES_PER_TOKEN / BW
    for r in res.records:
        assert r.kv_transfer_s == pytest.approx(pull, abs=1e-12)
        assert list(r.token_times_s) == pytest.approx([0.010 + pull + 0.005 * k for k in (1, 2, 3)], abs=1e-12)
    assert res.trace.step_cols["num_reqs"] == [2, 2, 2, 2]
