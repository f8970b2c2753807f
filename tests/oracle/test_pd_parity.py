"""Parity of the P/D scheduler paths with vLLM 0.33's real scheduler + a pull-mode KV connector.

Decode side: every request arrives with ``do_remote_prefill``; the mirror's consumer scheduler
(``kv_role="consumer"``, ``remote_prefill=True``) must schedule the same steps (admission with
whole-prompt blocks, WAITING_FOR_REMOTE_KVS outside running, kv_holding_waiting first, 1-token
resume) and hold the same number of free blocks after every step. Prefill side: requests with
``do_remote_decode`` and max_tokens=1 keep their blocks until ``finished_sending``. Transfer
completions follow the same fixed rule on both sides (``vllm_pd_driver.DELAYS``).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace

import pytest

from simulator.request import RequestSpec

BLOCK_SIZE = 16
DELAYS = (1, 3, 2, 5, 0, 4)     # == vllm_pd_driver.DELAYS


def make_requests(seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int]) -> list[RequestSpec]:
    rng = random.Random(seed)
    return [RequestSpec(f"r{i:03d}", 0.0, rng.randint(*prompt), rng.randint(*output)) for i in range(n)]


def run_mirror(requests, *, side: str, num_gpu_blocks: int, max_steps: int = 200_000, num_speculative_tokens: int = 0,
               accepted=None, kv_groups: tuple[int, ...] = (), **knobs):
    """The mirror's run of ``vllm_pd_driver.run_vllm_pd`` (same arguments); with
    ``num_speculative_tokens`` k > 0, EAGLE-style drafts accepted as ``accepted(id, context, drafts)``
    says, and trace entries (tokens, drafts). ``kv_groups``: the KV cache manager
    ``scheduler_trace.make_scheduler`` builds for those groups (hybrid, or Gated DeltaNet states)."""
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import make_scheduler

    k = num_speculative_tokens
    config = SchedulerConfig(debug=True, num_speculative_tokens=k, num_lookahead_tokens=k, **knobs)
    s = make_scheduler(config, num_gpu_blocks, kv_groups, kv_role="consumer" if side == "decode" else "producer")
    kv = s.kv
    if k:
        s.accept_drafts = lambda r, ctx, drafts: accepted(r.request_id, ctx, drafts)
    delay = {}
    for i, r in enumerate(requests):
        delay[r.request_id] = DELAYS[i % len(DELAYS)]
        if side == "decode":
            s.add_request(r, remote_prefill=True)
        else:
            s.add_request(replace(r, output_len=1), remote_decode=True)
    pending: dict[str, int] = {}
    trace, free = [], []

    def after_schedule(out):
        for rid in out.remote_kv_request_ids:
            pending[rid] = delay[rid]
        if out.total_num_scheduled_tokens > 0:
            trace.append(dict(zip(out.request_ids, zip(out.num_scheduled_tokens, out.spec_tokens))) if k
                         else out.as_dict())

    def update(out):
        ready = [rid for rid, left in pending.items() if left <= 0]
        for rid in ready:
            del pending[rid]
        for rid in pending:
            pending[rid] -= 1
        res = s.update_from_output(out)
        for rid in ready:       # vLLM: reported in this step's KVConnectorOutput
            (s.finish_remote_kv if side == "decode" else s.finish_sending_kv)(rid)
        if side == "prefill":
            for rid in res.finished_request_ids:
                pending[rid] = delay[rid]
        free.append(kv.num_free_blocks)

    queue: deque = deque()
    for _ in range(max_steps):
        if not (s.has_requests() or queue or pending):
            return trace, free
        if knobs["async_scheduling"]:
            if s.has_requests() or pending:
                out = s.schedule()
                after_schedule(out)
                queue.appendleft(out)
                if len(queue) < 2 and (out.total_num_scheduled_tokens > 0 or s.has_requests()):
                    continue
            elif not queue:
                continue
            update(queue.pop())
        else:
            out = s.schedule()
            after_schedule(out)
            update(out)
    raise RuntimeError("mirror still busy")


def pd_knobs(async_scheduling: bool, **extra) -> dict:
    """The scheduler knobs of the P/D parity cases, ``extra`` on top."""
    knobs = dict(max_num_seqs=16, max_num_batched_tokens=512, max_model_len=4096, block_size=BLOCK_SIZE,
                 enable_prefix_caching=False, long_prefill_token_threshold=0, policy="fcfs",
                 async_scheduling=async_scheduling)
    knobs.update(extra)
    return knobs


def assert_pd_parity(name: str, requests, *, side: str, num_gpu_blocks: int, **knobs):
    """Run ``requests`` on vLLM (``vllm_pd_driver.run_vllm_pd``) and on the mirror with the same
    arguments; schedules and free blocks must be equal step by step. Returns vLLM's (trace, free)."""
    import vllm_pd_driver

    expected = vllm_pd_driver.run_vllm_pd(requests, side=side, num_gpu_blocks=num_gpu_blocks, **knobs)
    actual = run_mirror(requests, side=side, num_gpu_blocks=num_gpu_blocks, **knobs)
    assert actual[0] == expected[0], f"{name}: schedules differ"
    assert actual[1] == expected[1], f"{name}: free blocks differ"
    return expected


def recomputed_locally(trace) -> set[str]:
    """Decode side: requests that ran a step of more than one token, i.e. were preempted after their
    KV load and recomputed locally (a loaded request resumes with one token)."""
    return {rid for step in trace for rid, tokens in step.items() if tokens > 1}


CASES = [
    # (name, side, seed, n, prompt range, output range, num_gpu_blocks, extra knobs)
    ("decode_roomy", "decode", 1, 30, (16, 400), (1, 40), 2000, {}),
    ("decode_tight_blocks", "decode", 2, 30, (40, 400), (20, 200), 90, {}),
    ("decode_tight_prefix_cache", "decode", 3, 30, (40, 400), (20, 200), 90, {"enable_prefix_caching": True}),
    ("decode_max_num_seqs_4", "decode", 4, 20, (16, 300), (1, 60), 2000, {"max_num_seqs": 4}),
    ("prefill_roomy", "prefill", 5, 30, (16, 600), (1, 1), 2000, {"enable_prefix_caching": True}),
    ("prefill_tight_blocks", "prefill", 6, 30, (100, 600), (1, 1), 120, {}),
    # a preempted request recomputes in 64-token chunks, leaving budget to admit pulls while it holds
    # fewer blocks than its sequence: the in-flight reservation refuses some (test_reservation_binds)
    ("decode_reservation_binds", "decode", 401, 30, (200, 1500), (50, 300), 200,
     {"max_num_batched_tokens": 1024, "long_prefill_token_threshold": 64}),
]


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pd_paths_match_vllm(case, async_scheduling) -> None:
    name, side, seed, n, prompt, output, blocks, extra = case
    requests = make_requests(seed, n, prompt, output)
    expected = assert_pd_parity(name, requests, side=side, num_gpu_blocks=blocks,
                                **pd_knobs(async_scheduling, **extra))
    assert len({rid for step in expected[0] for rid in step}) == n


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_reservation_binds(async_scheduling, monkeypatch) -> None:
    # Guards decode_reservation_binds: without the in-flight reservation the mirror schedules
    # otherwise than vLLM, so the case tests it.
    import vllm_pd_driver
    from simulator.scheduler import Scheduler

    name, side, seed, n, prompt, output, blocks, extra = next(c for c in CASES if c[0] == "decode_reservation_binds")
    requests = make_requests(seed, n, prompt, output)
    knobs = pd_knobs(async_scheduling, **extra)
    expected = vllm_pd_driver.run_vllm_pd(requests, side=side, num_gpu_blocks=blocks, **knobs)
    monkeypatch.setattr(Scheduler, "_inflight_prefill_reserved_blocks", lambda self: 0)
    assert run_mirror(requests, side=side, num_gpu_blocks=blocks, **knobs)[0] != expected[0]


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_tight_decode_case_really_preempts(async_scheduling) -> None:
    # Guards the parity cases: a "tight" decode case that never preempts tests nothing.
    import vllm_pd_driver

    _, side, seed, n, prompt, output, blocks, extra = CASES[1]
    requests = make_requests(seed, n, prompt, output)
    trace, _ = vllm_pd_driver.run_vllm_pd(requests, side=side, num_gpu_blocks=blocks,
                                          **pd_knobs(async_scheduling, **extra))
    assert recomputed_locally(trace), "no decode request was preempted and recomputed locally"


# Speculative decoding (EAGLE, k drafts) on both sides: (name, side, seed, n, prompt range, output
# range, num_gpu_blocks, k, acceptance, extra knobs). Acceptance rules as in test_spec_parity.
SPEC_CASES = [
    ("spec_decode_roomy", "decode", 11, 30, (16, 400), (1, 60), 2000, 3, "mixed", {}),
    ("spec_decode_tight_blocks", "decode", 12, 30, (40, 400), (20, 200), 90, 2, "mixed", {}),
    ("spec_decode_tight_prefix_cache", "decode", 13, 30, (40, 400), (20, 200), 90, 2, "all",
     {"enable_prefix_caching": True}),
    ("spec_decode_budget_40", "decode", 14, 20, (16, 300), (1, 60), 2000, 3, "mixed",
     {"max_num_batched_tokens": 40}),
    ("spec_decode_max_model_len", "decode", 15, 12, (100, 200), (100, 300), 2000, 3, "none", {"max_model_len": 256}),
    ("spec_prefill_cached", "prefill", 16, 30, (16, 600), (1, 1), 2000, 2, "mixed", {"enable_prefix_caching": True}),
    ("spec_prefill_tight_blocks", "prefill", 17, 30, (100, 600), (1, 1), 120, 3, "mixed", {}),
]
_ACCEPT = {
    "none": lambda rid, ctx, d: 0,
    "all": lambda rid, ctx, d: d,
    "mixed": lambda rid, ctx, d: (int(rid[1:]) * 7 + ctx * 13) % (d + 1),
}


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_pd_spec_paths_match_vllm(case, async_scheduling) -> None:
    import vllm_pd_driver

    name, side, seed, n, prompt, output, blocks, k, acceptance, extra = case
    knobs = pd_knobs(async_scheduling, **extra)
    requests = make_requests(seed, n, prompt, output)
    spec = dict(num_speculative_tokens=k, accepted=_ACCEPT[acceptance])
    expected = vllm_pd_driver.run_vllm_pd(requests, side=side, num_gpu_blocks=blocks, **spec, **knobs)
    actual = run_mirror(requests, side=side, num_gpu_blocks=blocks, **spec, **knobs)
    assert actual[0] == expected[0], f"{name}: schedules differ"
    assert actual[1] == expected[1], f"{name}: free blocks differ"
    if side == "decode":
        assert any(d for step in expected[0] for _, d in step.values()), f"{name}: no drafts verified"
