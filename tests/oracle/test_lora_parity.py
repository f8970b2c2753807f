"""Parity with LoRA adapters: our scheduler mirror schedules what vLLM 0.33's does under --max-loras.

Each case is a test_parity workload whose requests run adapters drawn (seeded) from
``num_adapters`` (id 0 = the base model, drawn with ``base_share``), through vLLM's real
Scheduler / AsyncScheduler with a ``LoRAConfig(max_loras=...)`` (``vllm_driver``; each request's
``LoRARequest`` puts its adapter's name in its block hashes) and through
``simulator.scheduler_trace.run_scheduler_only`` with ``SchedulerConfig.max_loras``. The traces
must be equal step by step, in grant order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest
from test_parity import Case, _knobs, first_difference, make_requests


@dataclass(frozen=True)
class LoraCase(Case):
    max_loras: int = 1
    num_adapters: int = 3
    base_share: float = 0.0


CASES = [
    LoraCase("max_loras_1_of_3", 41, 30, (16, 300), (1, 60), 3000),
    LoraCase("max_loras_2_of_5_async", 42, 40, (16, 400), (1, 80), 3000, max_num_batched_tokens=1024,
             async_scheduling=True, max_loras=2, num_adapters=5),
    LoraCase("max_loras_3_of_8_with_base", 43, 50, (16, 300), (1, 60), 3000, max_loras=3, num_adapters=8,
             base_share=0.3),
    LoraCase("shared_prefixes_across_adapters_cached", 44, 40, (20, 400), (1, 40), 3000, enable_prefix_caching=True,
             num_shared_prefixes=3, max_loras=2, num_adapters=3, base_share=0.25),
    LoraCase("tight_blocks_preemption", 45, 40, (50, 400), (50, 200), 100, max_loras=2, num_adapters=4),
    LoraCase("priority_async_tight", 46, 30, (50, 300), (30, 150), 90, policy="priority", priorities=(0, 1, 2),
             async_scheduling=True, max_loras=2, num_adapters=4),
    LoraCase("max_num_seqs_4_budget_128", 47, 24, (16, 500), (1, 60), 3000, max_num_seqs=4,
             max_num_batched_tokens=128, max_loras=1, num_adapters=2, base_share=0.5),
    LoraCase("prefill_interval_3_async", 48, 20, (100, 600), (20, 80), 3000, max_num_batched_tokens=128,
             prefill_schedule_interval=3, async_scheduling=True, max_loras=2, num_adapters=4),
]


def lora_requests(case: LoraCase):
    """test_parity's workload of the case, each request on an adapter drawn from 1..num_adapters
    (0 with probability base_share), seeded."""
    rng = random.Random(case.seed * 7919)
    return [replace(r, lora_id=0 if rng.random() < case.base_share else rng.randint(1, case.num_adapters))
            for r in make_requests(case)]


def _run_both(vllm_driver, case: LoraCase, max_loras: int | None = None):
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import run_scheduler_only

    requests, knobs = lora_requests(case), _knobs(case)
    loras = case.max_loras if max_loras is None else max_loras
    expected = vllm_driver.run_vllm_scheduler(requests, num_gpu_blocks=case.num_gpu_blocks, max_loras=case.max_loras,
                                              **knobs)
    actual = run_scheduler_only(requests, SchedulerConfig(**knobs, max_loras=loras), case.num_gpu_blocks)
    return requests, expected, [step for step in actual if step]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lora_mirror_matches_vllm(vllm_driver, case: LoraCase) -> None:
    _, expected, actual = _run_both(vllm_driver, case)
    diff = first_difference(expected, actual)
    assert diff is None, f"{case.name}: {diff}"


def test_max_loras_bounds_the_adapters_running_and_changes_the_schedule(vllm_driver) -> None:
    # Guards the cases: vLLM never runs more than max_loras adapters at once, the bound bites
    # (a larger one schedules differently), and ignoring it fails parity.
    for case in CASES:
        requests, expected, _ = _run_both(vllm_driver, case)
        lora_of = {r.request_id: r.lora_id for r in requests}
        assert max(len({lora_of[rid] for rid in step} - {0}) for step in expected) <= case.max_loras
        wide = vllm_driver.run_vllm_scheduler(requests, num_gpu_blocks=case.num_gpu_blocks,
                                              max_loras=case.num_adapters, **_knobs(case))
        assert wide != expected, f"{case.name}: max_loras changes nothing"
        _, _, unbounded = _run_both(vllm_driver, case, max_loras=case.num_adapters)
        assert first_difference(expected, unbounded) is not None, f"{case.name}: the mirror passes without the bound"


def test_adapters_do_not_share_cached_blocks(vllm_driver) -> None:
    # Guards the prefix case: with every request on one adapter more prompts hit the cache, so the
    # schedule differs (the adapter's name is in the block hashes, on both sides).
    case = next(c for c in CASES if c.name == "shared_prefixes_across_adapters_cached")
    one = replace(case, num_adapters=1, base_share=0.0, max_loras=1)
    _, many, _ = _run_both(vllm_driver, case)
    _, single, mirror = _run_both(vllm_driver, one)
    assert many != single and first_difference(single, mirror) is None
