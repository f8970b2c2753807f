"""Parity with speculative decoding: our scheduler mirror schedules what vLLM 0.33's does.

Each case is a seeded workload run through `vllm_driver.run_vllm_spec_scheduler` (vLLM's real
Scheduler / AsyncScheduler with an EAGLE-family SpeculativeConfig, k drafts per step) and
`simulator.scheduler_trace.run_spec_scheduler_only`; both take the same deterministic acceptance
rule ``accepted(request_id, context_len, drafts)``. The traces ``[{request_id: (tokens, drafts)},
...]`` must be equal step by step, in grant order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from test_parity import BLOCK_SIZE, Case, _knobs, first_difference

from simulator.request import RequestSpec


@dataclass(frozen=True)
class SpecCase(Case):
    """test_parity's Case (the scheduler knobs) with drafts: k per step, the acceptance rule
    (ACCEPTANCE key) and prompts shared in pairs (make_requests; policy "priority" draws
    priorities 0 / 1, ``priorities`` is not read)."""

    k: int = 3
    acceptance: str = "mixed"
    shared: str = ""                      # "duplicate" / "extends": pairs of requests sharing a prompt
    method: str = "eagle"                 # the drafter: "eagle" or "draft_model" (a separate draft model)


# Deterministic acceptance rules shared by both sides: (request_id, context_len, drafts) -> accepted.
ACCEPTANCE = {
    "none": lambda rid, ctx, d: 0,
    "all": lambda rid, ctx, d: d,
    "mixed": lambda rid, ctx, d: (int(rid[1:]) * 7 + ctx * 13) % (d + 1),
}

CASES = [
    SpecCase("sync_k3", 1, 30, (16, 400), (1, 80), 3000),
    SpecCase("sync_k1_all", 2, 30, (16, 400), (1, 80), 3000, k=1, acceptance="all"),
    SpecCase("sync_k4_none", 3, 20, (16, 400), (1, 60), 3000, k=4, acceptance="none"),
    SpecCase("async_k3", 4, 30, (16, 400), (1, 80), 3000, async_scheduling=True),
    SpecCase("async_k2_all", 5, 30, (16, 400), (1, 80), 3000, k=2, acceptance="all", async_scheduling=True),
    SpecCase("sync_tight_blocks", 6, 30, (50, 300), (50, 200), 80),
    SpecCase("async_tight_blocks", 7, 30, (50, 300), (50, 200), 80, async_scheduling=True),
    SpecCase("sync_budget_64", 8, 12, (100, 900), (5, 40), 3000, max_num_seqs=8, max_num_batched_tokens=64),
    SpecCase("async_threshold", 9, 16, (100, 900), (5, 40), 3000, long_prefill_token_threshold=48,
             async_scheduling=True),
    SpecCase("sync_prefix_cache", 10, 30, (16, 400), (1, 80), 3000, enable_prefix_caching=True),
    SpecCase("sync_duplicate_prompts_padded", 11, 24, (1, 20), (4, 40), 3000, enable_prefix_caching=True,
             shared="duplicate"),
    SpecCase("async_duplicate_prompts_padded", 12, 24, (1, 20), (4, 40), 3000, enable_prefix_caching=True,
             shared="duplicate", async_scheduling=True),
    SpecCase("sync_prompt_extends_prompt", 15, 24, (1, 6), (4, 40), 3000, enable_prefix_caching=True,
             shared="extends"),
    SpecCase("async_prompt_extends_prompt", 16, 24, (1, 6), (4, 40), 3000, enable_prefix_caching=True,
             shared="extends", async_scheduling=True),
    SpecCase("sync_max_model_len", 13, 10, (100, 200), (150, 300), 3000, max_model_len=256),
    SpecCase("priority_tight", 14, 24, (50, 300), (50, 150), 80, policy="priority"),
    # the scheduler knobs of tests/oracle/test_parity.py, with drafts
    SpecCase("watermark_tight_async", 17, 30, (50, 300), (30, 150), 120, watermark=0.1, async_scheduling=True),
    SpecCase("max_num_active_seqs", 18, 20, (16, 300), (10, 60), 3000, max_num_active_seqs=4),
    SpecCase("first_chunk_admission_tight", 19, 24, (100, 600), (20, 100), 90, max_num_batched_tokens=128,
             scheduler_reserve_full_isl=False),
    SpecCase("prefill_interval_3_async", 20, 6, (400, 900), (40, 120), 3000, max_num_batched_tokens=128,
             prefill_schedule_interval=3, async_scheduling=True),
    SpecCase("adaptive_threshold", 21, 12, (200, 800), (5, 40), 3000, long_prefill_token_threshold=16,
             long_prefill_token_threshold_adaptive=True),
    SpecCase("pp2_async", 22, 30, (16, 400), (1, 80), 3000, async_scheduling=True, pipeline_parallel_size=2),
    SpecCase("pp3_async_tight_blocks", 23, 30, (50, 300), (50, 200), 80, async_scheduling=True,
             pipeline_parallel_size=3),
]

# A separate draft model (vLLM "draft_model"): one input slot per scheduled request, plain block
# hashes. The budget cases are where the slots bite.
DRAFT_MODEL_CASES = [
    SpecCase("draft_sync_k3", 31, 30, (16, 400), (1, 80), 3000, method="draft_model"),
    SpecCase("draft_async_k2_all", 32, 30, (16, 400), (1, 80), 3000, k=2, acceptance="all", async_scheduling=True,
             method="draft_model"),
    SpecCase("draft_sync_budget_64", 33, 12, (100, 900), (5, 40), 3000, max_num_seqs=8, max_num_batched_tokens=64,
             method="draft_model"),
    SpecCase("draft_async_budget_40", 34, 16, (20, 300), (5, 60), 3000, max_num_seqs=8, max_num_batched_tokens=40,
             async_scheduling=True, method="draft_model"),
    SpecCase("draft_sync_tight_blocks", 35, 30, (50, 300), (50, 200), 80, method="draft_model"),
    SpecCase("draft_async_prefix_cache_duplicate_padded", 36, 24, (1, 20), (4, 40), 3000,
             enable_prefix_caching=True, shared="duplicate", async_scheduling=True, method="draft_model"),
    SpecCase("draft_sync_prompt_extends_prompt", 37, 24, (1, 6), (4, 40), 3000, enable_prefix_caching=True,
             shared="extends", method="draft_model"),
    SpecCase("draft_priority_tight_budget", 38, 24, (50, 300), (50, 150), 80, policy="priority",
             max_num_batched_tokens=48, max_num_seqs=8, method="draft_model"),
]


def make_requests(case: SpecCase) -> list[RequestSpec]:
    """Seeded workload (ids zero-padded: id order == list order). Pairs of consecutive requests
    share a prompt of 16 j tokens (j drawn from prompt_len): shared "duplicate": both get it plus
    one token, so the second finds all but its last token cached (a newly admitted 1-token
    decode); "extends": the first gets it as is, the second 16 more tokens (with an EAGLE drafter a
    block is hashed only with the token after it, so the first's last block is not hit)."""
    rng = random.Random(case.seed)
    requests = []
    for i in range(case.num_requests):
        output_len = rng.randint(*case.output_len)
        if case.shared:
            j = i // 2 + 1
            prompt_len = BLOCK_SIZE * random.Random(case.seed * 1000 + j).randint(*case.prompt_len)
            prompt_len += 1 if case.shared == "duplicate" else BLOCK_SIZE * (i % 2)
            token_ids = tuple(1 + j * 100_000 + t for t in range(prompt_len))
        else:
            prompt_len = rng.randint(*case.prompt_len)
            token_ids = None
        requests.append(RequestSpec(request_id=f"r{i:03d}", arrival_s=0.0, prompt_len=prompt_len,
                                    output_len=output_len, priority=rng.choice((0, 1)) if case.policy == "priority"
                                    else 0, prompt_token_ids=token_ids))
    return requests


def _run_both(vllm_driver, case: SpecCase):
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import run_spec_scheduler_only

    requests = make_requests(case)
    knobs, accept = _knobs(case), ACCEPTANCE[case.acceptance]
    expected = vllm_driver.run_vllm_spec_scheduler(requests, num_speculative_tokens=case.k, accepted=accept,
                                                   num_gpu_blocks=case.num_gpu_blocks, spec_method=case.method,
                                                   **knobs)
    draft_model = case.method == "draft_model"
    config = SchedulerConfig(**knobs, num_speculative_tokens=case.k, num_lookahead_tokens=case.k,
                             num_draft_slots=int(draft_model), eagle_drafter=not draft_model)
    actual = run_spec_scheduler_only(requests, config, case.num_gpu_blocks, accept)
    return requests, expected, actual


@pytest.mark.parametrize("case", CASES + DRAFT_MODEL_CASES, ids=[c.name for c in CASES + DRAFT_MODEL_CASES])
def test_spec_mirror_matches_vllm(vllm_driver, case: SpecCase) -> None:
    _, expected, actual = _run_both(vllm_driver, case)
    diff = first_difference(expected, actual)
    assert diff is None, f"{case.name}: {diff}"


def test_cases_exercise_what_they_name(vllm_driver) -> None:
    # Guards the cases: drafts are verified, tight cases preempt, padded cases pad.
    for case in CASES + DRAFT_MODEL_CASES:
        requests, expected, _ = _run_both(vllm_driver, case)
        assert any(d for step in expected for _, d in step.values()), f"{case.name}: no drafts verified"
        if "padded" in case.name:
            # a padded admission: 1 + k tokens with k drafts in a request's first step
            firsts = {}
            for step in expected:
                for rid, grant in step.items():
                    firsts.setdefault(rid, grant)
            assert (case.k + 1, case.k) in firsts.values(), f"{case.name}: no padded admission"
        if "tight" in case.name:
            # a recompute: a step of several tokens without drafts after the request verified drafts
            verified, again = set(), False
            for step in expected:
                for rid, (n, d) in step.items():
                    again |= rid in verified and n > 1 and d == 0
                    if d:
                        verified.add(rid)
            assert again, f"{case.name}: no request was preempted"


@pytest.mark.parametrize("name", ["watermark_tight_async", "max_num_active_seqs", "first_chunk_admission_tight",
                                  "prefill_interval_3_async", "adaptive_threshold", "pp2_async",
                                  "pp3_async_tight_blocks"])
def test_knob_cases_change_the_schedule(vllm_driver, name: str) -> None:
    # Guards the knob cases: with drafts too, vLLM schedules them differently than at the defaults.
    import dataclasses
    case = next(c for c in CASES if c.name == name)
    plain = dataclasses.replace(case, watermark=0.0, max_num_active_seqs=None, scheduler_reserve_full_isl=True,
                                prefill_schedule_interval=1, long_prefill_token_threshold_adaptive=False,
                                pipeline_parallel_size=1)
    _, with_knob, _ = _run_both(vllm_driver, case)
    _, without, _ = _run_both(vllm_driver, plain)
    assert with_knob != without, f"{name}: the knob changes nothing"
