"""Both timing modes on CPU: budgets, sample bounds, stated methods."""

import time

import pytest
import torch

from profiler.timing import TimingConfig, time_both, time_kernel, time_launch

CPU = torch.device("cpu")


def test_both_modes_report_median_and_spread_with_their_method():
    x = torch.randn(32, 32)
    kernel, launch = time_both(lambda: x @ x, CPU, TimingConfig(warmup_s=0, budget_s=0.01, min_reps=5, max_reps=50))
    assert (kernel.mode, launch.mode) == ("kernel", "launch")
    assert kernel.method == "cpu_fastest20" and launch.method == "cpu_wall"
    for t in (kernel, launch):
        assert 0 < t.p10_s <= t.median_s <= t.p90_s
    assert 1 <= kernel.num_samples <= 10 and 5 <= launch.num_samples <= 50  # kernel keeps the fastest 20%


def test_sampling_stops_at_max_reps_or_budget():
    calls = []
    t = time_launch(lambda: calls.append(1), CPU, TimingConfig(warmup_s=0, budget_s=10.0, min_reps=1, max_reps=7))
    assert t.num_samples == 7 and len(calls) == 8  # one warm-up call
    start = time.perf_counter()
    t = time_launch(lambda: time.sleep(0.002), CPU, TimingConfig(warmup_s=0, budget_s=0.01, min_reps=2, max_reps=10**6))
    assert time.perf_counter() - start < 0.2 and 2 <= t.num_samples <= 10


def test_kernel_mode_on_cpu_is_the_lower_envelope():
    delays = iter([0.0] + [0.004, 0.0, 0.004, 0.004, 0.004] * 2)  # warm-up, then 10 samples: 2 fast
    t = time_kernel(lambda: time.sleep(next(delays)), CPU, TimingConfig(warmup_s=0, budget_s=100, min_reps=10, max_reps=10))
    # every slow sample sleeps >= 4 ms, so the two fastest (the no-sleep calls) stay below it even
    # when a loaded machine delays a no-sleep call by a few ms
    assert t.num_samples == 2 and t.median_s < 0.004


@pytest.mark.parametrize("kwargs", [dict(budget_s=0), dict(warmup_s=-1), dict(min_reps=0), dict(min_reps=5, max_reps=2)])
def test_bad_timing_config_is_refused(kwargs):
    with pytest.raises(ValueError, match="TimingConfig"):
        TimingConfig(**kwargs)


@pytest.mark.parametrize("one_call_s, reps", [(7e-6, 20), (10e-6, 20), (11e-6, 19), (50e-6, 4), (200e-6, 1),
                                               (5e-3, 1), (0.0, 20)])
def test_graph_reps_spread_a_replay_over_about_200_us_of_copies(one_call_s, reps):
    from profiler.timing import graph_reps
    assert graph_reps(one_call_s) == reps


def test_both_modes_are_sampled_in_turn_within_twice_the_budget():
    from profiler.timing import _sample_modes
    calls = []
    samplers = [lambda: calls.append("k") or 1.0, lambda: calls.append("l") or 2.0]
    kernel, launch = _sample_modes(samplers, TimingConfig(warmup_s=0, budget_s=10.0, min_reps=1, max_reps=4))
    assert calls == ["k", "l"] * 5 and kernel == [1.0] * 4 and launch == [2.0] * 4   # one warm-up round
    calls.clear()
    start = time.perf_counter()
    slow = [lambda: time.sleep(0.001) or 0.0] * 2
    kernel, launch = _sample_modes(slow, TimingConfig(warmup_s=0, budget_s=0.01, min_reps=2, max_reps=10**6))
    took = time.perf_counter() - start
    assert len(kernel) == len(launch) and 2 <= len(kernel) <= 11 and 0.02 <= took < 0.3
