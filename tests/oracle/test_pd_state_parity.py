"""P/D parity with Gated DeltaNet state groups (Qwen3.5 without prefix caching: vLLM's "none" mamba
cache mode): test_pd_parity's decode ("consumer") and prefill ("producer") runs with three ``STATE``
groups and one full-attention group over one block pool, as Qwen3.5's KV cache groups are.

vLLM's side is ``vllm_pd_driver.run_vllm_pd(..., kv_groups=...)``: its real scheduler with
``KVCacheCoordinatorNoPrefixCache`` over ``MambaManager`` and ``FullAttentionManager``, and
``HMAPullConnector`` with NixlConnector's one-token backoff for mamba groups (the prefill side's
prompt loses its last token; the decode side loads all but the last and recomputes it). The mirror's
is the simulator's ``StateKVCacheManager`` behind its P/D scheduler paths. Schedules and free blocks
after every update_from_output must be equal step by step (``test_pd_parity.assert_pd_parity``).
"""

from __future__ import annotations

import pytest
from test_pd_parity import assert_pd_parity, make_requests, pd_knobs, recomputed_locally

from simulator.scheduler_trace import STATE

QWEN35 = (STATE, STATE, STATE, 0)

CASES = [
    # (name, side, seed, n, prompt range, output range, num_gpu_blocks, extra knobs)
    ("decode_state_budget_256", "decode", 301, 30, (1, 900), (1, 60), 3000, {"max_num_batched_tokens": 256}),
    ("decode_state_budget_2048", "decode", 302, 30, (16, 900), (1, 60), 3000, {"max_num_batched_tokens": 2048}),
    # tight: the state blocks count at admission; decode requests are preempted and recomputed locally
    ("decode_state_tight", "decode", 303, 30, (50, 600), (20, 200), 160, {}),
    ("decode_state_reservation_threshold_64", "decode", 304, 30, (200, 1500), (50, 300), 260,
     {"max_num_batched_tokens": 1024, "long_prefill_token_threshold": 64}),
    ("prefill_state_budget_2048", "prefill", 305, 30, (1, 900), (1, 1), 3000, {"max_num_batched_tokens": 2048}),
    # tight: admission waits for blocks (state ones included) held until finished_sending
    ("prefill_state_tight_budget_256", "prefill", 306, 30, (50, 900), (1, 1), 220, {"max_num_batched_tokens": 256}),
]
_BY_NAME = {case[0]: case for case in CASES}


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pd_state_paths_match_vllm(case, async_scheduling) -> None:
    name, side, seed, n, prompt, output, blocks, extra = case
    requests = make_requests(seed, n, prompt, output)
    expected = assert_pd_parity(name, requests, side=side, num_gpu_blocks=blocks, kv_groups=QWEN35,
                                **pd_knobs(async_scheduling, **extra))
    assert len({rid for step in expected[0] for rid in step}) == n


def _run_vllm(name: str, async_scheduling: bool, kv_groups):
    import vllm_pd_driver

    _, side, seed, n, prompt, output, blocks, extra = _BY_NAME[name]
    return vllm_pd_driver.run_vllm_pd(make_requests(seed, n, prompt, output), side=side, num_gpu_blocks=blocks,
                                      kv_groups=kv_groups, **pd_knobs(async_scheduling, **extra))


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_prefill_side_computes_all_but_the_last_prompt_token(async_scheduling) -> None:
    # Guards the backoff: vLLM's prefill instance schedules N - 1 tokens of an N-token prompt.
    name = "prefill_state_budget_2048"
    _, _, seed, n, prompt, output, _, _ = _BY_NAME[name]
    lengths = {r.request_id: r.prompt_len for r in make_requests(seed, n, prompt, output)}
    trace, _ = _run_vllm(name, async_scheduling, QWEN35)
    scheduled: dict[str, int] = {}
    for step in trace:
        for rid, tokens in step.items():
            scheduled[rid] = scheduled.get(rid, 0) + tokens
    assert scheduled == {rid: max(length - 1, 1) for rid, length in lengths.items()}


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_tight_state_decode_case_preempts(async_scheduling) -> None:
    # Guards decode_state_tight: a tight case that never preempts tests nothing.
    trace, free = _run_vllm("decode_state_tight", async_scheduling, QWEN35)
    assert recomputed_locally(trace), "no decode request was preempted and recomputed locally"
    assert min(free) == 0, "the pool never ran out"


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["decode_state_tight", "prefill_state_tight_budget_256"])
def test_state_groups_change_vllm_schedules(name, async_scheduling) -> None:
    # Guards the tight cases: the state groups must reach vLLM's scheduler, or the cases are
    # test_pd_parity's (one full-attention group, no backoff).
    state = _run_vllm(name, async_scheduling, QWEN35)
    plain = _run_vllm(name, async_scheduling, ())
    assert state[0] != plain[0] and state[1] != plain[1]
