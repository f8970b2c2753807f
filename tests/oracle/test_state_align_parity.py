"""Parity with Gated DeltaNet state groups in vLLM's "align" mamba cache mode (Qwen3.5 with prefix
caching, vLLM's default): our scheduler mirror (``AlignStateKVCacheManager`` and the scheduler's
block-aligned prefill split) schedules, and frees KV blocks, exactly as vLLM 0.33's real scheduler
does over its ``HybridKVCacheCoordinator`` with three ``MambaManager`` groups in the align mode (one
FlashInfer prefill checkpoint block each) and one ``FullAttentionManager``.

Each case is test_parity's seeded workload (shared prefixes where named) plus ``kv_groups``
(``STATE_ALIGN`` x 3, then 0) and a block size B (the attention block = hash block = hit alignment;
Qwen3.5's real one is ~1,000 tokens, so the cases scale prompts and budgets to B). Both sides:
`vllm_driver.run_vllm_scheduler(..., kv_groups=..., record_free_blocks=True)` and
`simulator.scheduler_trace.run_scheduler_only`. Traces and free blocks per step must be equal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from test_hybrid_parity import _vllm, assert_mirror_matches_vllm
from test_parity import Case, _resumed_requests, make_requests

from simulator.scheduler_trace import STATE, STATE_ALIGN

QWEN35_ALIGN = (STATE_ALIGN, STATE_ALIGN, STATE_ALIGN, 0)


@dataclass(frozen=True)
class AlignCase(Case):
    kv_groups: tuple = QWEN35_ALIGN
    block_size: int = 16
    enable_prefix_caching: bool = True


CASES = [
    AlignCase("align_sync", 301, 30, (16, 600), (1, 80), 3000, max_num_batched_tokens=256),
    AlignCase("align_shared_prefixes", 302, 50, (20, 500), (1, 60), 3000, max_num_batched_tokens=1024,
              num_shared_prefixes=4),
    AlignCase("align_shared_prefixes_block_64", 303, 50, (40, 900), (1, 60), 3000, max_num_batched_tokens=512,
              num_shared_prefixes=3, block_size=64),
    AlignCase("align_async_shared", 304, 40, (20, 500), (1, 60), 3000, max_num_batched_tokens=2048,
              async_scheduling=True, num_shared_prefixes=3),
    # a block wider than the budget: sub-block chunks that re-align at each boundary
    AlignCase("align_block_over_budget", 305, 16, (100, 1500), (1, 30), 3000, max_num_seqs=8,
              max_num_batched_tokens=96, block_size=128),
    AlignCase("align_long_prefill_threshold", 306, 30, (16, 1200), (1, 50), 3000, long_prefill_token_threshold=96,
              num_shared_prefixes=2, block_size=32),
    # tight pools: admission reserves the prompt (state and checkpoint blocks too); preemption
    AlignCase("align_tight_preemption", 307, 30, (50, 400), (50, 300), 110),
    AlignCase("align_tight_shared_preemption", 308, 40, (30, 400), (20, 200), 100, num_shared_prefixes=3),
    AlignCase("align_async_tight", 309, 30, (50, 400), (50, 250), 120, async_scheduling=True),
    AlignCase("align_pp2_async", 310, 30, (50, 500), (20, 200), 150, async_scheduling=True, pipeline_parallel_size=2,
              num_shared_prefixes=2),
    AlignCase("align_priority_tight", 311, 30, (50, 500), (20, 200), 120, policy="priority", priorities=(0, 1, 2)),
    AlignCase("align_watermark_tight", 312, 30, (50, 500), (20, 200), 130, watermark=0.05),
    AlignCase("align_first_chunk_admission_tight", 313, 30, (100, 600), (20, 200), 120,
              max_num_batched_tokens=128, scheduler_reserve_full_isl=False),
    AlignCase("align_one_group", 314, 20, (200, 900), (100, 400), 400, max_model_len=1000, kv_groups=(STATE_ALIGN, 0),
              num_shared_prefixes=2),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mirror_matches_vllm(vllm_driver, case: AlignCase) -> None:
    assert vllm_driver.STATE_ALIGN == STATE_ALIGN
    assert_mirror_matches_vllm(vllm_driver, case)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mirror_matches_vllm_with_mamba2_checkpoints(vllm_driver, case: AlignCase, monkeypatch) -> None:
    """Mamba2's layers (Nemotron-H) export a prefill checkpoint at any position (alignment 1), not
    on FlashInfer's 64-token grid: with hash block = mamba block = B both fall on block boundaries,
    so vLLM schedules the same and the same mirror follows it."""
    monkeypatch.setattr(vllm_driver, "MAMBA_CHECKPOINT_ALIGNMENT", 1)
    assert_mirror_matches_vllm(vllm_driver, case)


@pytest.mark.parametrize("name", [c.name for c in CASES if "tight" in c.name or "shared" in c.name])
def test_cases_exercise_the_align_mode(vllm_driver, name: str) -> None:
    """Guards the cases: vLLM schedules each otherwise than with the same state groups in the
    "none" mode (no prefix caching), and the preemption cases preempt."""
    case = next(c for c in CASES if c.name == name)
    trace, _ = _vllm(vllm_driver, case)
    none_groups = tuple(STATE if g == STATE_ALIGN else g for g in case.kv_groups)
    plain, _ = _vllm(vllm_driver, dataclasses.replace(case, enable_prefix_caching=False), kv_groups=none_groups)
    assert trace != plain, f"{name}: the align mode changes nothing"
    if "preemption" in name:
        assert _resumed_requests(trace, make_requests(case)), f"{name}: no request was preempted"
