"""The EAGLE spec-decode driver alone (`vllm_driver.run_vllm_spec_scheduler`): tiny cases whose
traces, `{request_id: (num_scheduled_tokens, num_scheduled_spec_tokens)}` per step, are derived
by hand from vLLM 0.33's scheduler (k drafts scheduled after every sampling step, rejections
rolled back, tokens past max_tokens trimmed, async placeholders, padded admissions)."""

from __future__ import annotations

import pytest
from test_vllm_driver_smoke import Req


def _knobs(**overrides):
    knobs = dict(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=1024, block_size=16,
                 num_gpu_blocks=100, enable_prefix_caching=False)
    knobs.update(overrides)
    return knobs


def _accept(num: int, calls: list | None = None):
    """`accepted` accepting min(num, drafts), logging its calls in `calls`."""
    def accepted(request_id: str, context_len: int, num_spec: int) -> int:
        if calls is not None:
            calls.append((request_id, context_len, num_spec))
        return min(num, num_spec)
    return accepted


def test_the_scheduler_is_built_as_eagle_on_model_runner_v2(vllm_driver):
    scheduler, _ = vllm_driver.new_scheduler(
        num_speculative_tokens=3, long_prefill_token_threshold=0, policy="fcfs",
        async_scheduling=False, watermark=0.0, **_knobs())
    assert scheduler.vllm_config.speculative_config.method == "eagle"
    assert scheduler.num_spec_tokens == scheduler.num_lookahead_tokens == 3
    assert scheduler.num_prefill_lookahead == 1
    assert scheduler.use_v2_model_runner and scheduler.can_skip_drafts
    assert scheduler.max_num_scheduled_tokens == 64


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_rejecting_every_draft_yields_one_token_per_step(vllm_driver, async_scheduling):
    # k=2. The prompt step samples token 1 and the drafter proposes 2 drafts; each later step
    # verifies 1 + 2 tokens, rejects both drafts and samples one token: tokens 2..5.
    # Async: the same steps (the running-loop guard sees the 5th token is sure after 4 decodes).
    trace = vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 20, 5)], num_speculative_tokens=2, accepted=_accept(0),
        async_scheduling=async_scheduling, **_knobs())
    assert trace == [{"a": (20, 0)}] + [{"a": (3, 2)}] * 4


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_accepting_every_draft_finishes_in_fewer_steps(vllm_driver, async_scheduling):
    # Step 2 yields 3 tokens (4 in all); step 3 yields 3 more, trimmed to max_tokens=5.
    trace = vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 20, 5)], num_speculative_tokens=2, accepted=_accept(2),
        async_scheduling=async_scheduling, **_knobs())
    assert trace == [{"a": (20, 0)}, {"a": (3, 2)}, {"a": (3, 2)}]


def test_async_schedules_a_step_it_cannot_rule_out(vllm_driver):
    # One of two drafts accepted: 1 + 2 + 2 = 5 tokens after three steps in both modes. Async
    # schedules step 4 before step 3's output: counting only one sure token per step in flight,
    # the request might still need it. Its output is dropped (the request has finished).
    sync = vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 20, 5)], num_speculative_tokens=2, accepted=_accept(1), **_knobs())
    async_ = vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 20, 5)], num_speculative_tokens=2, accepted=_accept(1), async_scheduling=True,
        **_knobs())
    assert sync == [{"a": (20, 0)}, {"a": (3, 2)}, {"a": (3, 2)}]
    assert async_ == sync + [{"a": (3, 2)}]


@pytest.mark.parametrize("async_scheduling, contexts",
                         [(False, [20, 21, 22, 23]), (True, [20, 23, 24, 25])])
def test_accepted_sees_the_schedulers_computed_tokens_before_the_step(vllm_driver, async_scheduling,
                                                                       contexts):
    # Sync: the true context (20, then one more token per step). Async: the count is optimistic,
    # step N+1 is scheduled before step N's 2 rejections are known: 20 | 20+3 | 23-2+3 | 24-2+3.
    calls: list = []
    vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 20, 5)], num_speculative_tokens=2, accepted=_accept(0, calls),
        async_scheduling=async_scheduling, **_knobs())
    assert calls == [("a", context, 2) for context in contexts]


def test_drafts_are_cut_to_the_token_budget(vllm_driver):
    # k=3, budget 10: decodes of 4 + 4 leave 2 tokens for c, i.e. 1 draft.
    trace = vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 4, 4), Req("b", 4, 4), Req("c", 2, 4)], num_speculative_tokens=3,
        accepted=_accept(0), **_knobs(max_num_batched_tokens=10))
    decode = {"a": (4, 3), "b": (4, 3), "c": (2, 1)}
    assert trace == [{"a": (4, 0), "b": (4, 0), "c": (2, 0)}] + [decode] * 3


def test_padded_admission_rejects_its_placeholder_drafts(vllm_driver):
    # One seat, same 17-token prompt. b hits a's first block (16 tokens) and has 1 token left:
    # padded to 1 + 3 with -1 drafts, which the GPU rejects (the step starts inside the prefill),
    # so b gets 1 token and `accepted` is not asked. Its next step accepts all 3: 1 + 4 >= 4.
    prompt = tuple(range(1, 18))
    calls: list = []
    trace = vllm_driver.run_vllm_spec_scheduler(
        [Req("a", 17, 1, prompt_token_ids=prompt), Req("b", 17, 4, prompt_token_ids=prompt)],
        num_speculative_tokens=3, accepted=_accept(3, calls),
        **_knobs(max_num_seqs=1, enable_prefix_caching=True))
    assert trace == [{"a": (17, 0)}, {"b": (4, 3)}, {"b": (4, 3)}]
    assert calls == [("b", 17, 3)]


def test_prefix_blocks_are_hashed_with_the_token_after_them(vllm_driver):
    # b extends a's 32-token prompt. Without a drafter b hits both of a's blocks in the same
    # step (16 left); with EAGLE a block's hash covers the next token, which a's 2nd block
    # lacks until a samples, so b hits one block and computes 32.
    prompt = tuple(range(1, 33))
    requests = [Req("a", 32, 2, prompt_token_ids=prompt),
                Req("b", 48, 2, prompt_token_ids=prompt + tuple(range(100, 116)))]
    knobs = _knobs(max_num_batched_tokens=128, enable_prefix_caching=True)
    assert vllm_driver.run_vllm_scheduler(requests, **knobs)[0] == {"a": 32, "b": 16}
    trace = vllm_driver.run_vllm_spec_scheduler(requests, num_speculative_tokens=2,
                                                accepted=_accept(0), **knobs)
    assert trace[0] == {"a": (32, 0), "b": (32, 0)}


def test_accepted_out_of_range_raises(vllm_driver):
    with pytest.raises(ValueError, match="accepted"):
        vllm_driver.run_vllm_spec_scheduler(
            [Req("a", 20, 5)], num_speculative_tokens=2, accepted=lambda rid, context, n: n + 1,
            **_knobs())
