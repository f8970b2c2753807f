"""Parity with a hybrid KV cache: our scheduler mirror schedules, and frees KV blocks, exactly as
vLLM 0.33's real scheduler does when full-attention and sliding-window KV cache groups share one
block pool (what gpt-oss or Gemma-3 get in vLLM).

Each case is test_parity's seeded workload plus ``kv_groups``: one entry per vLLM KV cache group, in
group order, 0 = full attention, W > 0 = a sliding window of W tokens. Both sides run it:
`vllm_driver.run_vllm_scheduler(..., kv_groups=..., record_free_blocks=True)` (the oracle: vLLM's
HybridKVCacheCoordinator with prefix caching, KVCacheCoordinatorNoPrefixCache without; CacheConfig's
default sparse retention, prefix_cache_retention_interval 0) and
`simulator.scheduler_trace.run_scheduler_only(..., kv_groups=..., record_free_blocks=True)` (the
mirror). The traces ``[{request_id: num_scheduled_tokens}, ...]`` must be equal step by step, in
grant order, and so must the free blocks of the pool right after each step's schedule().
Steps that schedule nothing are dropped from both sides.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from test_parity import BLOCK_SIZE, Case, _knobs, _resumed_requests, first_difference, make_requests

assert BLOCK_SIZE == 16   # the windows below are picked against 16-token blocks (200: not a multiple)


@dataclass(frozen=True)
class HybridCase(Case):
    """test_parity's Case (workload and scheduler knobs) with the model's KV cache groups."""

    kv_groups: tuple[int, ...] = (128, 0)   # sliding first, as gpt-oss


GEMMA_3_1B_GROUPS = (512,) * 6 + (0,)

CASES = [
    # 300 blocks: admission waits for blocks (no preemption); the sliding group's cap counts
    HybridCase("hybrid_sync_no_prefix_cache", 101, 30, (16, 600), (1, 80), 300, max_num_batched_tokens=256),
    HybridCase("hybrid_sync_cached_unique_prompts", 102, 30, (16, 600), (1, 80), 3000,
               max_num_batched_tokens=2048, enable_prefix_caching=True),
    HybridCase("hybrid_sync_shared_prefixes_cached", 103, 40, (20, 500), (1, 60), 3000,
               max_num_batched_tokens=256, enable_prefix_caching=True, num_shared_prefixes=3),
    HybridCase("hybrid_async_shared_prefixes_cached_full_first", 104, 40, (20, 500), (1, 60), 3000,
               max_num_batched_tokens=2048, enable_prefix_caching=True, num_shared_prefixes=3,
               async_scheduling=True, kv_groups=(0, 128)),
    HybridCase("hybrid_tight_preemption", 105, 30, (50, 400), (50, 300), 110),
    HybridCase("hybrid_async_tight_cached_shared", 106, 30, (30, 400), (20, 200), 100,
               enable_prefix_caching=True, num_shared_prefixes=3, async_scheduling=True),
    HybridCase("hybrid_window_32_chunked_budget_64", 107, 10, (200, 1500), (1, 30), 3000, max_num_seqs=8,
               max_num_batched_tokens=64, kv_groups=(32, 0)),
    HybridCase("hybrid_window_200_threshold_cached", 108, 30, (16, 1200), (1, 50), 3000,
               long_prefill_token_threshold=96, enable_prefix_caching=True, num_shared_prefixes=3,
               kv_groups=(200, 0)),
    HybridCase("hybrid_window_200_tight_full_first", 109, 30, (50, 400), (50, 250), 100,
               max_num_batched_tokens=64, kv_groups=(0, 200)),
    HybridCase("gemma_like_shared_prefixes_cached", 110, 40, (20, 600), (1, 60), 3000,
               max_num_batched_tokens=256, enable_prefix_caching=True, num_shared_prefixes=3,
               kv_groups=(64, 64, 64, 0)),
    HybridCase("gemma_like_async_tight", 111, 30, (50, 400), (50, 250), 160, async_scheduling=True,
               kv_groups=(64, 64, 64, 0)),
    HybridCase("hybrid_first_chunk_admission_tight", 112, 30, (100, 600), (20, 200), 120,
               max_num_batched_tokens=128, scheduler_reserve_full_isl=False),
    # 250 blocks: out-of-window frees keep all requests running (one full-attention group preempts)
    HybridCase("all_sliding_no_prefix_cache", 113, 30, (16, 900), (1, 80), 250, max_num_batched_tokens=256,
               kv_groups=(128,)),
    HybridCase("all_sliding_async_shared_prefixes_cached", 114, 40, (20, 600), (1, 60), 3000,
               max_num_batched_tokens=256, enable_prefix_caching=True, num_shared_prefixes=3,
               async_scheduling=True, kv_groups=(128,)),
    # PP (decode stagger, pp + 1 / pp batches in flight), priority preemption, the watermark and a
    # max_model_len that cuts outputs
    HybridCase("hybrid_pp2_async_cached", 115, 30, (50, 500), (20, 200), 150, async_scheduling=True,
               pipeline_parallel_size=2, enable_prefix_caching=True, num_shared_prefixes=2),
    HybridCase("hybrid_pp2_sync", 116, 30, (50, 500), (20, 200), 150, pipeline_parallel_size=2),
    HybridCase("hybrid_priority_tight", 117, 30, (50, 500), (20, 200), 120, policy="priority",
               priorities=(0, 1, 2)),
    HybridCase("hybrid_watermark_cached", 118, 30, (50, 500), (20, 200), 150, watermark=0.05,
               enable_prefix_caching=True, num_shared_prefixes=3, kv_groups=(64, 0)),
    HybridCase("hybrid_max_model_len_cached", 119, 20, (200, 900), (100, 400), 400, max_model_len=1000,
               enable_prefix_caching=True),
    # google/gemma-3-1b-it's own groups (22 sliding layers of window 512 and 4 full: six sliding
    # groups, then the full one; test_gemma_3_1b_engine_groups)
    # Llama 4's chunked local attention (kv group -C: chunks of C tokens; vLLM's
    # ChunkedLocalAttentionManager): chunks of 64 and 128 (Scout: 3 chunked groups to 1 full)
    HybridCase("chunked_sync_no_prefix_cache", 121, 30, (16, 600), (1, 80), 300, max_num_batched_tokens=256,
               kv_groups=(-128, 0)),
    HybridCase("chunked_async_shared_prefixes_cached", 122, 40, (20, 600), (1, 60), 3000,
               max_num_batched_tokens=256, enable_prefix_caching=True, num_shared_prefixes=3,
               async_scheduling=True, kv_groups=(-64, -64, -64, 0)),
    HybridCase("chunked_sync_cached_budget_64", 123, 20, (100, 900), (1, 40), 3000, max_num_batched_tokens=64,
               enable_prefix_caching=True, num_shared_prefixes=2, kv_groups=(-128, 0)),
    HybridCase("chunked_async_tight_cached", 124, 30, (50, 400), (50, 250), 140, async_scheduling=True,
               enable_prefix_caching=True, num_shared_prefixes=3, kv_groups=(-64, -64, -64, 0)),
    HybridCase("chunked_tight_preemption_full_first", 125, 30, (50, 400), (50, 300), 110, kv_groups=(0, -128)),
    HybridCase("chunked_pp2_async", 126, 30, (50, 500), (20, 200), 150, async_scheduling=True,
               pipeline_parallel_size=2, enable_prefix_caching=True, num_shared_prefixes=2, kv_groups=(-64, 0)),
    HybridCase("gemma3_1b_groups_async_tight_cached", 120, 30, (200, 1200), (300, 1500), 700,
               max_num_batched_tokens=512, enable_prefix_caching=True, num_shared_prefixes=3,
               async_scheduling=True, kv_groups=GEMMA_3_1B_GROUPS),
]


def _case(name: str) -> HybridCase:
    return next(c for c in CASES if c.name == name)


def _vllm(vllm_driver, case: HybridCase, kv_groups: tuple[int, ...] | None = None):
    """vLLM's (trace, free blocks per step) for ``case`` (with ``kv_groups`` instead of the case's)."""
    groups = case.kv_groups if kv_groups is None else kv_groups
    return vllm_driver.run_vllm_scheduler(make_requests(case), num_gpu_blocks=case.num_gpu_blocks,
                                          kv_groups=groups, record_free_blocks=True, **_knobs(case))


def _nonempty(trace: list[dict[str, int]], free: list[int]) -> tuple[list[dict[str, int]], list[int]]:
    """Drop the steps that scheduled nothing (and their free-block counts, when recorded per step)."""
    if len(free) == len(trace):
        kept = [(step, n) for step, n in zip(trace, free) if step]
        return [step for step, _ in kept], [n for _, n in kept]
    return [step for step in trace if step], free


def first_free_blocks_difference(
    trace: list[dict[str, int]], expected: list[int], actual: list[int]
) -> str | None:
    """The first step whose free-block count differs (None when equal)."""
    for step, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            return (f"free blocks differ first at step {step} (of vllm {len(expected)}, mirror {len(actual)}): "
                    f"vllm {want}, mirror {got}; the step: {trace[step]}"
                    + (f"; the step before: {trace[step - 1]}, free {expected[step - 1]}" if step else ""))
    if len(expected) != len(actual):
        return f"free blocks recorded for vllm {len(expected)} steps, mirror {len(actual)}"
    return None


def assert_mirror_matches_vllm(vllm_driver, case) -> None:
    """The mirror's trace and free blocks per step equal vLLM's for ``case`` (its ``kv_groups``)."""
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import run_scheduler_only

    expected, expected_free = _vllm(vllm_driver, case)
    actual, actual_free = run_scheduler_only(make_requests(case), SchedulerConfig(**_knobs(case)),
                                             case.num_gpu_blocks, kv_groups=case.kv_groups, record_free_blocks=True)
    actual, actual_free = _nonempty(actual, actual_free)
    diff = first_difference(expected, actual)
    assert diff is None, f"{case.name}: {diff}"
    diff = first_free_blocks_difference(expected, expected_free, actual_free)
    assert diff is None, f"{case.name}: {diff}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mirror_matches_vllm(vllm_driver, case: HybridCase) -> None:
    assert_mirror_matches_vllm(vllm_driver, case)


@pytest.mark.parametrize("name", [c.name for c in CASES if "tight" in c.name])
def test_tight_cases_really_preempt(vllm_driver, name: str) -> None:
    # Guards the parity cases themselves: a "tight" case that never preempts tests nothing.
    case = _case(name)
    requests = make_requests(case)
    trace, _ = _vllm(vllm_driver, case)
    assert _resumed_requests(trace, requests), f"{name}: no request was preempted"
    assert {rid for step in trace for rid in step} == {r.request_id for r in requests}


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_free_blocks_are_recorded_per_step(vllm_driver, name: str) -> None:
    # The oracle's free-block series: one count per kept step, within the pool (null block excluded).
    case = _case(name)
    trace, free = _vllm(vllm_driver, case)
    assert len(free) == len(trace) > 0
    assert all(0 <= n <= case.num_gpu_blocks - 1 for n in free)


@pytest.mark.parametrize("name", ["hybrid_sync_no_prefix_cache", "all_sliding_no_prefix_cache",
                                  "hybrid_tight_preemption", "hybrid_async_tight_cached_shared",
                                  "hybrid_window_200_tight_full_first", "gemma_like_async_tight",
                                  "hybrid_first_chunk_admission_tight", "hybrid_sync_shared_prefixes_cached",
                                  "gemma_like_shared_prefixes_cached", "gemma3_1b_groups_async_tight_cached",
                                  "chunked_sync_no_prefix_cache",
                                  "chunked_async_tight_cached", "chunked_tight_preemption_full_first"])
def test_hybrid_groups_change_the_schedule(vllm_driver, name: str) -> None:
    # Guards the cases against being vacuous: with the hybrid groups vLLM schedules them differently
    # than with its single full-attention group (more blocks per token when tight, out-of-window
    # frees for the all-sliding model, sparse sliding retention shortening prefix hits when cached).
    case = _case(name)
    hybrid, _ = _vllm(vllm_driver, case)
    plain, _ = _vllm(vllm_driver, case, kv_groups=())
    assert hybrid != plain, f"{name}: the hybrid KV cache changes nothing"


def test_kv_groups_zero_is_the_default_single_group(vllm_driver) -> None:
    # kv_groups=(0,) builds one full-attention group: the same run as the default kv_groups=().
    case = dataclasses.replace(_case("hybrid_tight_preemption"), kv_groups=(0,))
    assert _vllm(vllm_driver, case) == _vllm(vllm_driver, case, kv_groups=())


def test_first_free_blocks_difference_reports_the_step() -> None:
    assert first_free_blocks_difference([{"a": 1}], [5], [5]) is None
    assert "step 1" in first_free_blocks_difference([{"a": 4}, {"a": 1}], [5, 4], [5, 3])
    assert "vllm 2 steps, mirror 1" in first_free_blocks_difference([{"a": 4}, {"a": 1}], [5, 4], [5])


def test_gemma_3_1b_engine_groups() -> None:
    # The simulator's own manager for google/gemma-3-1b-it is the case's group layout.
    from frontier.gpu import get_gpu
    from frontier.model_spec import load_model_spec
    from simulator.engine_args import EngineArgs
    from simulator.memory import kv_layout

    model = load_model_spec("google/gemma-3-1b-it")
    resolved = EngineArgs(model="google/gemma-3-1b-it", gpu="H100").resolve(model, get_gpu("H100"))
    kv = resolved.kv_cache_manager(1000, kv_layout(model, resolved.parallel, resolved.block_size))
    assert kv.group_windows == GEMMA_3_1B_GROUPS
