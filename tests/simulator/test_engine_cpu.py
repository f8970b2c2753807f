"""The engine core's CPU time per step (simulator/engine_cpu.py): its measured fit, and where it
lands on the timeline, sync (in series with the forward) and async (overlapped)."""

from pathlib import Path

import pandas as pd
import pytest

from simulator.engine_args import EngineArgs
from simulator.engine_cpu import MEASURED, EngineCpu, fit_cpu_overheads
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.replica import Replica
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.simulation import SimulationSpec, run_simulation
from simulator.trace import BatchTrace
from simulator.workload import WorkloadSpec
from tests.simulator.test_replica import FixedCostEngine, steps_of

VIDUR_CPU = Path(__file__).resolve().parents[2].parent / "shared/datasets/vidur/legacy/6d98aa8/data/profiling/a100/cpu_overheads.csv"
CPU = EngineCpu(fixed_s=0.002, per_request_s=0.001)     # 2 ms + 1 ms per scheduled request


@pytest.mark.skipif(not VIDUR_CPU.is_file(), reason="Vidur's dataset is not beside the checkout")
def test_measured_is_the_fit_of_vidurs_single_gpu_rows():
    fit = fit_cpu_overheads(pd.read_csv(VIDUR_CPU))
    assert fit.fixed_s == pytest.approx(MEASURED.fixed_s, abs=5e-7)          # 0.813 ms
    assert fit.per_request_s == pytest.approx(MEASURED.per_request_s, abs=5e-8)   # 0.0423 ms
    assert MEASURED.step_s(64) == pytest.approx(0.813e-3 + 64 * 0.0423e-3)


def test_fit_and_model_refuse_what_they_cannot_use():
    one = pd.DataFrame({"tensor_parallel_degree": [1], "batch_size": [8], "schedule_median": [0.2],
                        "sampler_e2e_median": [0.5], "prepare_inputs_e2e_median": [0.3],
                        "process_model_outputs_median": [0.2]})
    with pytest.raises(ValueError, match=r"tensor_parallel_degree=1: need two batch sizes, have \[8\]"):
        fit_cpu_overheads(one)
    with pytest.raises(ValueError, match=r"EngineCpu fixed_s=-0.001 must be a number >= 0 \(seconds\)"):
        EngineCpu(fixed_s=-0.001, per_request_s=0.0)


def _replica(async_scheduling: bool, engine_cpu: EngineCpu | None):
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=128,
                             async_scheduling=async_scheduling)
    loop = EventLoop()
    kv = KVCacheManager(16, config.block_size, config.max_model_len, enable_prefix_caching=True)
    events = []
    replica = Replica(0, loop, Scheduler(config, kv), FixedCostEngine(), BatchTrace(True),
                      on_update=lambda rep, res, t: events.append(t), async_scheduling=async_scheduling,
                      engine_cpu=engine_cpu)
    return loop, replica, events


def test_sync_steps_pay_their_cpu_time_before_the_forward():
    """Prompt 40, output 3, budget 32, 10 ms forwards: each step starts 3 ms (2 + 1 request) after
    the previous one ended, so every token comes 3 ms later per step than without the model."""
    loop, replica, events = _replica(False, CPU)
    replica.add_request(RequestSpec("a", 0.0, 40, 3))
    loop.run()
    assert replica.trace.step_cols["start_s"] == pytest.approx([0.003, 0.016, 0.029, 0.042])
    assert events == pytest.approx([0.026, 0.039, 0.052])       # 0.020 / 0.030 / 0.040 without it
    assert replica.busy_s == pytest.approx(0.040)               # GPU time only


def test_async_steps_hide_cpu_time_shorter_than_the_forward():
    """Async: the next step's CPU work runs during the forward, so only the first step waits."""
    loop, replica, events = _replica(True, CPU)
    replica.add_request(RequestSpec("a", 0.0, 40, 3))
    loop.run()
    assert steps_of(replica.trace) == [{"a": 32}, {"a": 8}, {"a": 1}, {"a": 1}]
    assert replica.trace.step_cols["start_s"] == pytest.approx([0.003, 0.013, 0.023, 0.033])
    assert events == pytest.approx([0.023, 0.033, 0.043])


def test_async_steps_wait_for_cpu_time_longer_than_the_forward():
    """12 ms of CPU per step against 10 ms forwards: the engine core's one thread sets the pace
    (step k's CPU work ends at 12 (k + 1) ms)."""
    loop, replica, _ = _replica(True, EngineCpu(fixed_s=0.011, per_request_s=0.001))
    replica.add_request(RequestSpec("a", 0.0, 40, 3))
    loop.run()
    assert replica.trace.step_cols["start_s"] == pytest.approx([0.012, 0.024, 0.036, 0.048])


def test_async_scheduling_defaults_follow_the_release():
    assert EngineArgs(vllm_version="0.13.0").effective_async_scheduling is False
    assert EngineArgs(vllm_version="0.14.0").effective_async_scheduling is True
    assert EngineArgs().effective_async_scheduling is True
    assert EngineArgs(vllm_version="0.12.0", async_scheduling=True).effective_async_scheduling is True
    assert EngineArgs(async_scheduling=False).effective_async_scheduling is False


def test_a_simulation_of_a_sync_release_runs_slower_with_engine_cpu():
    """Same requests, vLLM 0.12 (synchronous): each step cycle grows by its CPU time; the 0.33
    default (async) hides it behind the forward but for the first step."""
    def run(version: str, cpu: bool):
        return run_simulation(SimulationSpec(
            engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", vllm_version=version),
            workload=WorkloadSpec(dataset_name="random", num_prompts=8, random_input_len=256,
                                  random_output_len=32, random_range_ratio=0.0, seed=0),
            engine_cpu_overhead=cpu)).summary
    sync_off, sync_on = run("0.12.0", False), run("0.12.0", True)
    assert sync_on["mean_tpot_ms"] - sync_off["mean_tpot_ms"] == pytest.approx(0.813 + 8 * 0.0423, abs=1e-9)
    async_off, async_on = run("0.33.0", False), run("0.33.0", True)
    assert async_on["mean_tpot_ms"] == pytest.approx(async_off["mean_tpot_ms"], abs=1e-9)
    assert async_on["mean_ttft_ms"] - async_off["mean_ttft_ms"] == pytest.approx(0.813 + 8 * 0.0423, abs=1e-9)
