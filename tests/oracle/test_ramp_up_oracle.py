"""Ramp-up arrivals (``--ramp-up-strategy``): ours against vLLM 0.33's own ``get_request``.

vLLM's generator sleeps until each request's time; a fake clock (``time.time`` and
``asyncio.sleep`` of its module patched) reads those times without waiting. The gaps come from
the global NumPy generator, seeded as ``vllm bench serve`` seeds it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from simulator.workload import WorkloadSpec

pytestmark = pytest.mark.oracle


def vllm_times(n: int, strategy: str, start: int, end: int, burstiness: float, seed: int) -> list[float]:
    from vllm.benchmarks import serve

    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    async def collect() -> list[tuple[float, float]]:
        return [(clock[0], rate) async for _, rate in serve.get_request(
            list(range(n)), float("inf"), burstiness, strategy, start, end)]

    mp = pytest.MonkeyPatch()
    mp.setattr(serve.time, "time", lambda: clock[0])
    mp.setattr(serve.asyncio, "sleep", sleep)
    try:
        np.random.seed(seed)
        return asyncio.run(collect())
    finally:
        mp.undo()


@pytest.mark.parametrize("strategy,start,end,burstiness,seed", [
    ("linear", 1, 20, 1.0, 0), ("exponential", 2, 50, 1.0, 3), ("linear", 5, 5, 0.5, 7),
    ("exponential", 1, 8, float("inf"), 0)])
def test_ramp_up_arrivals_equal_vllms(strategy, start, end, burstiness, seed):
    n = 200
    want = vllm_times(n, strategy, start, end, burstiness, seed)
    got = WorkloadSpec(num_prompts=n, burstiness=burstiness, seed=seed, ramp_up_strategy=strategy,
                       ramp_up_start_rps=start, ramp_up_end_rps=end).arrivals()
    assert got == pytest.approx([t for t, _ in want], rel=1e-12, abs=1e-12)
    assert want[0][1] == start and want[-1][1] == pytest.approx(end)
