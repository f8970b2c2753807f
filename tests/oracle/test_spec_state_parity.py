"""Parity with speculative decoding over Gated DeltaNet state groups (Qwen3.5 with its MTP drafter):
our scheduler mirror schedules, and frees KV blocks, exactly as vLLM 0.33's real scheduler does when
each mamba group's spec holds ``num_speculative_blocks`` = k speculative state blocks per request
(``MambaBase.get_kv_cache_spec`` with a drafter), in both mamba cache modes:

* "none" (``STATE``, no prefix caching): a request takes 1 + k state blocks per group at its
  first slots (vLLM counts k x max_model_len more tokens), nothing more;
* "align" (``STATE_ALIGN``, prefix caching): the table ends in k speculative blocks after the
  running state, a request's first allocation may take k more, and a chunk moving the state past
  them relocates them to the table's end; a padded decode admission clipped by the block-aligned
  split loses its padding.

Each case is test_spec_hybrid_parity's HybridSpecCase (workload, knobs, k, acceptance rule, the
EAGLE drafter's layer in the full-attention group) with Qwen3.5's groups. Both sides:
`vllm_driver.run_vllm_spec_scheduler(..., kv_groups=..., record_free_blocks=True)` and
`simulator.scheduler_trace.run_spec_scheduler_only`; traces and free blocks per step must be equal.
"""

from __future__ import annotations

import pytest
from test_spec_hybrid_parity import HybridSpecCase, _preempted, _vllm, assert_spec_mirror_matches_vllm

from simulator.scheduler_trace import STATE, STATE_ALIGN

NONE = (STATE, STATE, STATE, 0)
ALIGN = (STATE_ALIGN, STATE_ALIGN, STATE_ALIGN, 0)

CASES = [
    HybridSpecCase("ss_none_sync_k3", 401, 30, (16, 600), (1, 80), 400, kv_groups=NONE),
    HybridSpecCase("ss_none_async_k1_budget_2048", 402, 30, (16, 600), (1, 80), 3000, k=1,
                   max_num_batched_tokens=2048, async_scheduling=True, kv_groups=NONE),
    HybridSpecCase("ss_none_sync_k3_tight", 403, 30, (50, 400), (50, 200), 110, kv_groups=NONE),
    HybridSpecCase("ss_align_sync_k3", 404, 30, (16, 600), (1, 80), 400, enable_prefix_caching=True, kv_groups=ALIGN),
    HybridSpecCase("ss_align_sync_k3_duplicate_prompts", 405, 40, (2, 30), (4, 80), 3000, enable_prefix_caching=True,
                   shared="duplicate", kv_groups=ALIGN),
    HybridSpecCase("ss_align_sync_k1_shared_prefixes_budget_2048", 406, 30, (20, 600), (1, 60), 3000, k=1,
                   acceptance="all", max_num_batched_tokens=2048, enable_prefix_caching=True, num_shared_prefixes=3,
                   kv_groups=ALIGN),
    HybridSpecCase("ss_align_async_k1_tight_shared", 407, 30, (30, 400), (20, 200), 110, k=1,
                   enable_prefix_caching=True, num_shared_prefixes=3, async_scheduling=True, kv_groups=ALIGN),
    HybridSpecCase("ss_align_sync_k3_tight", 408, 30, (50, 400), (50, 200), 110, enable_prefix_caching=True,
                   kv_groups=ALIGN),
    HybridSpecCase("ss_align_async_k3_budget_64", 409, 12, (100, 900), (5, 60), 3000, max_num_seqs=8,
                   max_num_batched_tokens=64, enable_prefix_caching=True, async_scheduling=True,
                   num_shared_prefixes=2, kv_groups=ALIGN),
    HybridSpecCase("ss_align_async_k3_duplicate_prompts", 410, 40, (2, 30), (4, 80), 3000,
                   enable_prefix_caching=True, shared="extends", async_scheduling=True, kv_groups=ALIGN),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_spec_state_mirror_matches_vllm(vllm_driver, case: HybridSpecCase) -> None:
    assert_spec_mirror_matches_vllm(vllm_driver, case)


def test_cases_exercise_what_they_name(vllm_driver) -> None:
    """Guards the cases: drafts are verified, tight cases preempt, and vLLM's
    free blocks differ from the same groups' without speculative state blocks (k = 0 in the
    specs: the drafter's layer alone)."""
    for case in CASES:
        trace, free = _vllm(vllm_driver, case)
        assert any(d for step in trace for _, d in step.values()), f"{case.name}: no drafts verified"
        assert _preempted(trace) or "tight" not in case.name, f"{case.name}: nothing preempted"
        plain = [0] * len(case.kv_groups)
        _, plain_free = _vllm(vllm_driver, case, kv_groups=tuple(plain[:1]))
        assert free != plain_free, f"{case.name}: the state groups change nothing"
