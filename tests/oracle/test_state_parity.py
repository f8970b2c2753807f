"""Parity with Gated DeltaNet state groups (Qwen3.5 without prefix caching): our scheduler mirror
schedules, and frees KV blocks, exactly as vLLM 0.33's real scheduler does when mamba groups in the
"none" cache mode (one state block per request: block size max_model_len) share one block pool
with a full-attention group.

Each case is test_parity's seeded workload plus ``kv_groups`` (``STATE`` entries for the GDN
groups, first as in Qwen3.5, whose layer 0 is a GDN layer; 0 for the full-attention group). Both
sides: `vllm_driver.run_vllm_scheduler(..., kv_groups=..., record_free_blocks=True)` (vLLM's
KVCacheCoordinatorNoPrefixCache over MambaManager and FullAttentionManager) and
`simulator.scheduler_trace.run_scheduler_only` (`StateKVCacheManager`). Traces and free blocks
per step must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from test_hybrid_parity import _vllm, assert_mirror_matches_vllm
from test_parity import Case, _resumed_requests, make_requests

from simulator.scheduler_trace import STATE

QWEN35_GROUPS = (STATE, STATE, STATE, 0)


@dataclass(frozen=True)
class StateCase(Case):
    kv_groups: tuple = QWEN35_GROUPS


CASES = [
    StateCase("state_sync", 201, 30, (16, 600), (1, 80), 3000, max_num_batched_tokens=256),
    StateCase("state_async", 202, 40, (20, 500), (1, 60), 3000, max_num_batched_tokens=2048, async_scheduling=True),
    # tight pools: admission waits for the state blocks too; preemption frees them
    StateCase("state_tight_preemption", 203, 30, (50, 400), (50, 300), 110),
    StateCase("state_async_tight", 204, 30, (50, 400), (50, 250), 120, async_scheduling=True),
    StateCase("state_pp2_async", 205, 30, (50, 500), (20, 200), 150, async_scheduling=True, pipeline_parallel_size=2),
    StateCase("state_priority_tight", 206, 30, (50, 500), (20, 200), 120, policy="priority", priorities=(0, 1, 2)),
    StateCase("state_watermark_tight", 207, 30, (50, 500), (20, 200), 130, watermark=0.05),
    StateCase("state_first_chunk_admission_tight", 208, 30, (100, 600), (20, 200), 120,
              max_num_batched_tokens=128, scheduler_reserve_full_isl=False),
    StateCase("state_one_group_max_model_len", 209, 20, (200, 900), (100, 400), 400, max_model_len=1000,
              kv_groups=(STATE, 0)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mirror_matches_vllm(vllm_driver, case: StateCase) -> None:
    assert vllm_driver.STATE == STATE
    assert_mirror_matches_vllm(vllm_driver, case)


@pytest.mark.parametrize("name", [c.name for c in CASES if "tight" in c.name])
def test_tight_cases_really_preempt_or_wait(vllm_driver, name: str) -> None:
    """Guards the cases: with the state groups vLLM schedules a tight case otherwise than with its
    full-attention group alone, and the preemption cases preempt."""
    case = next(c for c in CASES if c.name == name)
    trace, _ = _vllm(vllm_driver, case)
    plain, _ = _vllm(vllm_driver, case, kv_groups=())
    assert trace != plain, f"{name}: the state groups change nothing"
    if "preemption" in name:
        assert _resumed_requests(trace, make_requests(case)), f"{name}: no request was preempted"
