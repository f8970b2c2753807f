"""The vLLM driver alone: tiny cases whose step traces are derived by hand from
engine-semantics §1 (budget shared, running first, optimistic progress, preemption
of the last running request, recompute on resume, in-step prefix sharing, async
finishes seen one step late)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Req:
    request_id: str
    prompt_len: int
    output_len: int
    priority: int = 0
    prompt_token_ids: tuple[int, ...] | None = None


def _run(driver, requests, **overrides):
    kwargs = dict(
        max_num_seqs=8,
        max_num_batched_tokens=32,
        max_model_len=1024,
        block_size=16,
        num_gpu_blocks=100,
        enable_prefix_caching=False,
    )
    kwargs.update(overrides)
    return driver.run_vllm_scheduler(requests, **kwargs)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_two_chunked_prompts_share_the_budget(vllm_driver, async_scheduling):
    # a: 32 (chunk) | a: 8 ends prompt -> token 1, b: 24 (chunk) | a decode, b: 16 ends prompt
    # | a: token 3 (done), b decode | b: token 3. Async gives the same non-empty steps.
    trace = _run(vllm_driver, [Req("a", 40, 3), Req("b", 40, 3)], async_scheduling=async_scheduling)
    assert trace == [{"a": 32}, {"a": 8, "b": 24}, {"a": 1, "b": 16}, {"a": 1, "b": 1}, {"b": 1}]


def test_grant_order_is_running_first_then_admitted(vllm_driver):
    # b is admitted in step 1 after a; in step 2 both run and keep list order a, b.
    trace = _run(vllm_driver, [Req("b", 8, 2), Req("a", 8, 2)], max_num_batched_tokens=64)
    assert [list(step) for step in trace] == [["b", "a"], ["b", "a"]]


def test_preempted_request_restarts_from_scratch(vllm_driver):
    # 5 blocks = null + 4 usable, 16 tokens each. Step 1: a, b take 2 blocks each (free 0).
    # Step 2: a's decode needs a 3rd block -> the last running request (b) is preempted;
    # no admission in that step. b (prompt 32 + 1 output = 33 tokens, 3 blocks) cannot be
    # re-admitted while a holds 3-4 blocks, so a decodes alone to its 20th token (19 steps),
    # then b recomputes all 33 tokens (no prefix caching) and decodes its 18 remaining tokens.
    trace = _run(
        vllm_driver,
        [Req("a", 32, 20), Req("b", 32, 20)],
        max_num_batched_tokens=64,
        num_gpu_blocks=5,
    )
    expected = [{"a": 32, "b": 32}] + [{"a": 1}] * 19 + [{"b": 33}] + [{"b": 1}] * 18
    assert trace == expected


def test_prefix_blocks_are_shared_within_the_same_step(vllm_driver):
    # Same 48-token prompt: a's blocks are hashed when scheduled, so b (admitted in the same
    # step) hits them; the hit is capped below num_tokens, i.e. 2 full blocks (32 tokens).
    prompt = tuple(range(1, 49))
    requests = [Req("a", 48, 3, prompt_token_ids=prompt), Req("b", 48, 3, prompt_token_ids=prompt)]
    trace = _run(vllm_driver, requests, max_num_batched_tokens=128, enable_prefix_caching=True)
    assert trace == [{"a": 48, "b": 16}, {"a": 1, "b": 1}, {"a": 1, "b": 1}]


def test_async_frees_a_finished_slot_one_step_late(vllm_driver):
    # max_num_seqs=2. Sync: a's 2nd token ends it in step 2, so c is admitted in step 3.
    # Async: step 3 is scheduled before step 2's output is processed; a still holds its
    # running slot (the scheduler already knows it needs no more tokens), so c waits a step.
    requests = [Req("a", 10, 2), Req("b", 10, 5), Req("c", 10, 1)]
    sync = _run(vllm_driver, requests, max_num_seqs=2)
    assert sync == [{"a": 10, "b": 10}, {"a": 1, "b": 1}, {"b": 1, "c": 10}, {"b": 1}, {"b": 1}]
    async_ = _run(vllm_driver, requests, max_num_seqs=2, async_scheduling=True)
    assert async_ == [{"a": 10, "b": 10}, {"a": 1, "b": 1}, {"b": 1}, {"b": 1, "c": 10}, {"b": 1}]


def test_priority_policy_admits_lower_value_first(vllm_driver):
    # One seat: the priority heap serves the lowest value first, whatever the list order.
    requests = [Req("a", 8, 1, priority=2), Req("b", 8, 1, priority=0), Req("c", 8, 1, priority=1)]
    trace = _run(vllm_driver, requests, max_num_seqs=1, policy="priority")
    assert trace == [{"b": 8}, {"c": 8}, {"a": 8}]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_request_that_never_fits_raises_instead_of_spinning(vllm_driver, async_scheduling):
    # 3 blocks = null + 2 usable (32 tokens); a 100-token prompt can never be admitted.
    with pytest.raises(RuntimeError, match="still busy"):
        _run(vllm_driver, [Req("a", 100, 1)], num_gpu_blocks=3, max_steps=50,
             async_scheduling=async_scheduling)
