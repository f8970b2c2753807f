"""The P/D driver with EAGLE spec decoding (`vllm_pd_driver.run_vllm_pd(..., num_speculative_tokens=k,
accepted=...)`) alone: tiny cases run through vLLM 0.33's real scheduler + the PullConnector, with
exact traces `{request_id: (num_scheduled_tokens, num_scheduled_spec_tokens)}` and the free blocks
after every update_from_output (block 0 is the null block: N blocks leave N - 1 free)."""

from __future__ import annotations

import pytest
from test_spec_driver_smoke import _accept
from test_vllm_driver_smoke import Req


def _knobs(**overrides):
    knobs = dict(max_num_seqs=16, max_num_batched_tokens=512, max_model_len=4096, block_size=16,
                 enable_prefix_caching=False, long_prefill_token_threshold=0, policy="fcfs",
                 async_scheduling=False)
    knobs.update(overrides)
    return knobs


@pytest.fixture(scope="module")
def pd():
    import vllm_pd_driver as module

    return module


def _run(pd, requests, side, blocks, k, accepted, **overrides):
    return pd.run_vllm_pd(requests, side=side, num_gpu_blocks=blocks, num_speculative_tokens=k,
                          accepted=accepted, **_knobs(**overrides))


def test_eagle_with_a_kv_connector_resolves_legacy_hashes_and_a_step_reservation(pd):
    scheduler, _ = pd.new_pd_scheduler(num_gpu_blocks=100, num_speculative_tokens=2,
                                       **_knobs(enable_prefix_caching=True))
    assert scheduler.num_spec_tokens == scheduler.num_lookahead_tokens == 2
    assert scheduler.num_prefill_lookahead == 1
    assert scheduler.use_v2_model_runner and scheduler.can_skip_drafts
    # "KV connectors keep the legacy hashes": no hash lookahead, so the EAGLE block drop stays
    assert scheduler.num_hash_lookahead_tokens == 0 and scheduler.use_eagle_block_drop
    assert scheduler._spec_decode_step_blocks == 1          # cdiv(1 + 2 + 2, 16)
    plain, _ = pd.new_pd_scheduler(num_gpu_blocks=100, **_knobs())
    assert plain._spec_decode_step_blocks == 0 and plain.num_lookahead_tokens == 0


def test_k_needs_accepted(pd):
    with pytest.raises(ValueError, match="accepted"):
        _run(pd, [Req("a", 40, 6)], "decode", 100, 2, None)


@pytest.mark.parametrize("async_scheduling, free, contexts", [
    (False, [96] * 7 + [99] * 2, [40, 41, 42, 43, 44]),
    (True, [96] * 5 + [95] * 3 + [99] * 3, [42, 43, 44, 45, 46]),
])
def test_decode_side_promoted_request_is_padded_and_its_drafts_rejected(pd, async_scheduling, free,
                                                                        contexts):
    # Load of 40 tokens (3 blocks, no lookahead), reported one update later; promoted with
    # num_computed_tokens = 39 and padded to 1 + 2 with -1 drafts, which the GPU rejects (a new
    # request to model runner V2): 1 token, `accepted` not asked. Then 5 steps of 1 + 2, all
    # drafts rejected: 6 outputs. Sync never shows the 4th block (c 44 + 3 + 2 = 49 tokens) because
    # that step finishes the request; async allocates it before the previous output arrives.
    calls: list = []
    trace, free_blocks = _run(pd, [Req("a", 40, 6)], "decode", 100, 2, _accept(0, calls),
                              async_scheduling=async_scheduling)
    assert trace == [{"a": (3, 2)}] * 6
    assert free_blocks == free
    assert calls == [("a", c, 2) for c in contexts]


@pytest.mark.parametrize("async_scheduling, steps, contexts", [
    (False, 3, [40, 43]), (True, 4, [42, 43, 46]),
])
def test_decode_side_accepting_every_draft(pd, async_scheduling, steps, contexts):
    # 1 (padded first step) + 3 + 3 >= 6; async schedules a 4th step it cannot rule out.
    calls: list = []
    trace, _ = _run(pd, [Req("a", 40, 6)], "decode", 100, 2, _accept(2, calls),
                    async_scheduling=async_scheduling)
    assert trace == [{"a": (3, 2)}] * steps
    assert calls == [("a", c, 2) for c in contexts]


@pytest.mark.parametrize("prompt, free", [
    # a's reservation: cdiv(43 + 1 + 2 + 2, 16) - 3 = 0 -> b fits: 3 <= 4 - 0 - 1.
    (43, [1, 1, 1, 4, 4, 7, 7]),
    # cdiv(44 + 5, 16) - 3 = 1 -> b refused (3 > 4 - 1 - 1) until a finishes.
    (44, [4, 4, 4, 7, 4, 4, 4, 4, 4, 7, 7]),
])
def test_async_load_admission_reserves_spec_decode_blocks(pd, prompt, free):
    # 7 usable blocks, two loads of 3 blocks each. With k=2 a load is admitted only if its blocks
    # fit in free - (in-flight loads' remaining blocks for num_tokens + 1 + 2k) - cdiv(1 + 2k, 16).
    trace, free_blocks = _run(pd, [Req("a", prompt, 2), Req("b", prompt, 2)], "decode", 8, 2, _accept(0))
    assert trace == [{"a": (3, 2)}, {"a": (3, 2)}, {"b": (3, 2)}, {"b": (3, 2)}]
    assert free_blocks == free
    # without a drafter both loads are admitted at once either way
    trace0, free0 = pd.run_vllm_pd([Req("a", prompt, 2), Req("b", prompt, 2)], side="decode",
                                   num_gpu_blocks=8, **_knobs())
    assert free0[0] == 1


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_promoted_request_waits_when_the_padded_step_does_not_fit_the_budget(pd, async_scheduling):
    # Budget 7: a and c decode 3 + 3, b (loaded, promoted) needs 1 + 2 > 1 left: the padding
    # `break`s admission ("prefer to not schedule than schedule un-padded") until a finishes.
    trace, _ = _run(pd, [Req("a", 20, 8), Req("b", 20, 8), Req("c", 20, 8)], "decode", 100, 2,
                    _accept(0), max_num_batched_tokens=7, max_num_seqs=4,
                    async_scheduling=async_scheduling)
    assert trace == ([{"a": (3, 2)}] + [{"a": (3, 2), "c": (3, 2)}] * 7
                     + [{"c": (3, 2), "b": (3, 2)}] + [{"b": (3, 2)}] * 7)


@pytest.mark.parametrize("async_scheduling, free", [
    (False, [92, 92, 95, 95, 99]), (True, [92, 92, 95, 95, 99, 99]),
])
def test_prefill_side_holds_lookahead_blocks_until_sent(pd, async_scheduling, free):
    # max_tokens=1: no drafts scheduled (skip_drafts); b allocates cdiv(48 + 2, 16) = 4 blocks
    # (3 without a drafter) and keeps them until finished_sending.
    calls: list = []
    trace, free_blocks = _run(pd, [Req("a", 40, 1), Req("b", 48, 1)], "prefill", 100, 2,
                              _accept(2, calls), async_scheduling=async_scheduling)
    assert trace == [{"a": (40, 0), "b": (48, 0)}]
    assert free_blocks == free
    assert calls == []


@pytest.mark.parametrize("k, second", [(0, 8), (2, (24, 0))])
def test_prefill_side_prefix_hit_drops_the_last_block(pd, k, second):
    # Legacy hashes with a connector: a resend of a 40-token prompt hits 32 tokens, EAGLE drops
    # the last matched block -> 16.
    prompt = tuple(range(1, 41))
    requests = [Req("a", 40, 1, prompt_token_ids=prompt), Req("b", 40, 1, prompt_token_ids=prompt)]
    trace, _ = pd.run_vllm_pd(requests, side="prefill", num_gpu_blocks=100, num_speculative_tokens=k,
                              accepted=_accept(0) if k else None,
                              **_knobs(enable_prefix_caching=True, max_num_seqs=1))
    assert trace[1] == {"b": second}
