"""Parity with speculative decoding over a hybrid KV cache: our scheduler mirror schedules, and frees
KV blocks, exactly as vLLM 0.33's real scheduler does for a model with sliding-window layers and an
EAGLE drafter (gpt-oss + an EAGLE-3 head: groups (sliding 128, full), the draft layer in the full one).

Each case is test_spec_parity's SpecCase (workload, knobs, k, acceptance rule) plus ``kv_groups``
(test_hybrid_parity's meaning: one entry per vLLM KV cache group, in group order, 0 = full attention,
W > 0 = a sliding window of W tokens). Both sides run it:
`vllm_driver.run_vllm_spec_scheduler(..., kv_groups=..., record_free_blocks=True)` (the oracle: the
draft layer joins the first full-attention group, flagged ``is_eagle_group``; with prefix caching
blocks are hashed with the token after them, so vLLM's coordinator drops no EAGLE block) and
`simulator.scheduler_trace.run_spec_scheduler_only(..., kv_groups=..., record_free_blocks=True)`
(the mirror). The traces ``[{request_id: (tokens, drafts)}, ...]`` must be equal step by step, in
grant order, and so must the pool's free blocks right after each step's schedule().
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import test_parity
import test_spec_parity
from test_hybrid_parity import first_free_blocks_difference
from test_parity import BLOCK_SIZE, _knobs, first_difference
from test_spec_parity import ACCEPTANCE, SpecCase

assert BLOCK_SIZE == 16   # the windows below are picked against 16-token blocks


@dataclass(frozen=True)
class HybridSpecCase(SpecCase):
    """test_spec_parity's SpecCase with the model's KV cache groups (sliding first, as gpt-oss)."""

    kv_groups: tuple[int, ...] = (128, 0)


CASES = [
    # 400 blocks: admission waits for blocks (no preemption); the sliding group's cap counts
    HybridSpecCase("hs_sync_k3_no_cache", 201, 30, (16, 600), (1, 80), 400),
    HybridSpecCase("hs_async_k1_full_first_budget_2048", 202, 30, (16, 600), (1, 80), 3000, k=1,
                   max_num_batched_tokens=2048, async_scheduling=True, kv_groups=(0, 128)),
    HybridSpecCase("hs_sync_k3_duplicate_prompts_cached", 203, 40, (2, 30), (4, 80), 3000,
                   enable_prefix_caching=True, shared="duplicate"),
    HybridSpecCase("hs_async_k3_prompt_extends_prompt_cached_full_first", 204, 40, (2, 30), (4, 80), 3000,
                   enable_prefix_caching=True, shared="extends", async_scheduling=True, kv_groups=(0, 128)),
    HybridSpecCase("hs_sync_k1_shared_prefixes_cached_budget_2048", 205, 30, (20, 600), (1, 60), 3000, k=1,
                   acceptance="all", max_num_batched_tokens=2048, enable_prefix_caching=True,
                   num_shared_prefixes=3),
    HybridSpecCase("hs_gemma_like_sync_k3_budget_64", 206, 10, (200, 1200), (5, 40), 3000, max_num_seqs=8,
                   max_num_batched_tokens=64, kv_groups=(64, 64, 64, 0)),
    HybridSpecCase("hs_gemma_like_async_k1_duplicate_prompts_cached", 207, 40, (2, 30), (4, 80), 3000, k=1,
                   enable_prefix_caching=True, shared="duplicate", async_scheduling=True,
                   kv_groups=(64, 64, 64, 0)),
    HybridSpecCase("hs_sync_k3_tight_blocks", 208, 30, (50, 400), (50, 200), 110),
    HybridSpecCase("hs_async_k1_tight_blocks_cached_shared", 209, 30, (30, 400), (20, 200), 110, k=1,
                   enable_prefix_caching=True, num_shared_prefixes=3, async_scheduling=True),
    HybridSpecCase("hs_gemma_like_async_k3_tight_budget_64", 210, 30, (50, 300), (100, 300), 160,
                   max_num_batched_tokens=64, async_scheduling=True, kv_groups=(64, 64, 64, 0)),
]


def _case(name: str) -> HybridSpecCase:
    return next(c for c in CASES if c.name == name)


def make_requests(case: HybridSpecCase):
    """test_spec_parity's workload (pairs sharing a prompt with ``shared``); with
    ``num_shared_prefixes`` test_parity's (each prompt a shared prefix + its own suffix)."""
    if case.num_shared_prefixes:
        return test_parity.make_requests(case)
    return test_spec_parity.make_requests(case)


def _vllm(vllm_driver, case: HybridSpecCase, kv_groups: tuple[int, ...] | None = None):
    """vLLM's (trace, free blocks per step) for ``case`` (with ``kv_groups`` instead of the case's)."""
    groups = case.kv_groups if kv_groups is None else kv_groups
    return vllm_driver.run_vllm_spec_scheduler(
        make_requests(case), num_speculative_tokens=case.k, accepted=ACCEPTANCE[case.acceptance],
        num_gpu_blocks=case.num_gpu_blocks, kv_groups=groups, record_free_blocks=True, **_knobs(case))


def _preempted(trace: list[dict[str, tuple[int, int]]]) -> set[str]:
    """Requests seen recomputing (test_spec_parity's rule): a step of several tokens without
    drafts after the request verified drafts."""
    verified, again = set(), set()
    for step in trace:
        for rid, (n, d) in step.items():
            if rid in verified and n > 1 and d == 0:
                again.add(rid)
            if d:
                verified.add(rid)
    return again


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_spec_hybrid_mirror_matches_vllm(vllm_driver, case: HybridSpecCase) -> None:
    assert_spec_mirror_matches_vllm(vllm_driver, case)


def assert_spec_mirror_matches_vllm(vllm_driver, case: HybridSpecCase) -> None:
    """The mirror's trace and free blocks per step equal vLLM's for ``case`` (its ``kv_groups``)."""
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import run_spec_scheduler_only

    requests = make_requests(case)
    knobs = _knobs(case)
    expected, expected_free = _vllm(vllm_driver, case)
    config = SchedulerConfig(**knobs, num_speculative_tokens=case.k, num_lookahead_tokens=case.k)
    actual, actual_free = run_spec_scheduler_only(requests, config, case.num_gpu_blocks,
                                                  ACCEPTANCE[case.acceptance], kv_groups=case.kv_groups,
                                                  record_free_blocks=True)
    diff = first_difference(expected, actual)
    assert diff is None, f"{case.name}: {diff}"
    diff = first_free_blocks_difference(expected, expected_free, actual_free)
    assert diff is None, f"{case.name}: {diff}"


def test_cases_exercise_what_they_name(vllm_driver) -> None:
    # Guards the cases: drafts are verified, every request runs, tight cases preempt (and only
    # they), padded cases pad, and the free-block series is one count per step within the pool.
    for case in CASES:
        requests = make_requests(case)
        trace, free = _vllm(vllm_driver, case)
        assert any(d for step in trace for _, d in step.values()), f"{case.name}: no drafts verified"
        assert {rid for step in trace for rid in step} == {r.request_id for r in requests}, case.name
        assert len(free) == len(trace) > 0 and all(0 <= n < case.num_gpu_blocks for n in free), case.name
        assert bool(_preempted(trace)) == ("tight" in case.name), f"{case.name}: preempted {_preempted(trace)}"
        if case.shared == "duplicate":
            # a padded admission: 1 + k tokens with k drafts in a request's first step (a prefix hit)
            firsts: dict[str, tuple[int, int]] = {}
            for step in trace:
                for rid, grant in step.items():
                    firsts.setdefault(rid, grant)
            assert (case.k + 1, case.k) in firsts.values(), f"{case.name}: no padded admission"


@pytest.mark.parametrize("name", ["hs_sync_k3_no_cache", "hs_sync_k3_duplicate_prompts_cached",
                                  "hs_gemma_like_sync_k3_budget_64", "hs_sync_k3_tight_blocks",
                                  "hs_gemma_like_async_k3_tight_budget_64"])
def test_hybrid_groups_change_vllms_free_blocks(vllm_driver, name: str) -> None:
    # Guards the cases against being vacuous: vLLM's pool with the hybrid groups (and the draft
    # layer in the full one) is not the single full-attention group's.
    case = _case(name)
    hybrid, hybrid_free = _vllm(vllm_driver, case)
    plain, plain_free = _vllm(vllm_driver, case, kv_groups=())
    assert hybrid_free != plain_free, f"{name}: the hybrid KV cache changes no free-block count"
    if "tight" in name:
        assert hybrid != plain, f"{name}: the hybrid KV cache changes nothing in the schedule"


@pytest.mark.parametrize("enable_prefix_caching", [False, True])
@pytest.mark.parametrize("kv_groups", [(128, 0), (0, 128), (64, 64, 64, 0)])
def test_draft_layer_joins_the_first_full_group(vllm_driver, kv_groups, enable_prefix_caching) -> None:
    # What vLLM built: the draft layer in the (first) full-attention group, flagged is_eagle_group;
    # with prefix caching the hashes cover the token after each block (the request block hasher's
    # and the block pool's lookahead 1), which clears the EAGLE block drop: drop_eagle_group_ids is
    # empty and no manager has use_eagle. Without, the flagged group would drop (nothing is cached).
    scheduler, block_hasher = vllm_driver.new_scheduler(
        kv_groups=kv_groups, num_speculative_tokens=3, block_size=BLOCK_SIZE,
        enable_prefix_caching=enable_prefix_caching, max_num_seqs=8, max_num_batched_tokens=512,
        max_model_len=4096, num_gpu_blocks=500, long_prefill_token_threshold=0, policy="fcfs",
        async_scheduling=False, watermark=0.0)
    coordinator = scheduler.kv_cache_manager.coordinator
    groups = coordinator.kv_cache_config.kv_cache_groups
    full = kv_groups.index(0)
    assert [("draft_layer" in g.layer_names, g.is_eagle_group) for g in groups] == \
        [(i == full, i == full) for i in range(len(kv_groups))]
    assert coordinator.eagle_group_ids == {full}
    assert [m.use_eagle for m in coordinator.single_type_managers] == [False] * len(kv_groups)
    if enable_prefix_caching:
        hasher_vars = dict(zip(block_hasher.__code__.co_freevars,
                               (cell.cell_contents for cell in block_hasher.__closure__)))
        assert hasher_vars["num_hash_lookahead_tokens"] == 1
        assert scheduler.vllm_config.num_hash_lookahead_tokens == 1
        assert coordinator.block_pool.num_hash_lookahead_tokens == 1
        assert coordinator.drop_eagle_group_ids == set()
        assert not scheduler.use_eagle_block_drop and not scheduler.kv_cache_manager.use_eagle
    else:
        assert block_hasher is None and scheduler.vllm_config.num_hash_lookahead_tokens == 0
        assert coordinator.drop_eagle_group_ids == {full}
        assert scheduler.use_eagle_block_drop


def test_drafter_needs_a_full_attention_group(vllm_driver) -> None:
    case = dataclasses.replace(_case("hs_sync_k3_no_cache"), num_requests=2)
    with pytest.raises(ValueError, match="kv_groups"):
        _vllm(vllm_driver, case, kv_groups=(128,))
