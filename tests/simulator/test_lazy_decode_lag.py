"""Lazy decode when the caller's processing lag varies: the block-caching visits stay exact.

A lazy request's filled block can be cached at the first schedule() after the step whose token
filled it is processed. `Scheduler._plan` guesses that schedule() from the current lag between
scheduled and processed steps; when the caller processes a step earlier than guessed,
update_from_output wakes the request (`Scheduler._wake`). Here an async caller processes its
oldest step either right away (lag 1) or one schedule() later (lag 2), at random, so both the
guess and the wake-up are exercised; a lazy and a per-request scheduler fed the same requests
must make the same plans and finishes, and hold the same KV state after every schedule().

Not compared after update_from_output: with async scheduling and a step processed before the
next one is scheduled (lag 1), the per-request path caches a block whose KV that step completed
while processing it, the lazy path at the next schedule(), before any prefix look-up (so no plan
or result differs). `tests/simulator/test_lazy_decode.py` (fixed lag) compares it there too.
Pools here are large enough not to preempt: with lag 1, a preemption victim's block can be
cached by the per-request path and not by the lazy one (found while writing this test, on the
tree before the wake-up too; `Replica` keeps lag 2 while requests run, so simulations are exact).
"""

from __future__ import annotations

import random
from array import array
from collections import deque

import pytest

from test_lazy_decode import assert_same_run

from simulator.kv_cache.hybrid import HybridKVCacheManager
from simulator.kv_cache.manager import KVCacheManager
from simulator.memory import max_in_flight_tokens
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig

# kv_num_cached_blocks is compared after every schedule() (the KV state), not at the end: the
# run ends on update_from_output calls (see above).
FIELDS = ("status", "num_computed_tokens", "num_output_tokens", "num_output_placeholders",
          "num_in_flight_tokens", "kv_num_blocks", "num_preemptions", "block_hashes")


def _kv_state(s: Scheduler) -> tuple:
    pool = s.kv.pool
    tables = [dict(t) for t in s.kv.tables] if isinstance(s.kv, HybridKVCacheManager) else dict(s.kv.req_to_blocks)
    return (tables, pool.free_queue.order(), list(pool.ref_cnt), dict(pool.cached), list(pool.block_hash))


def _drive(seed: int, lazy: bool, *, caching: bool, num_blocks: int, steps: int = 500,
           kv_role: str | None = None, budget: int = 256, add_p: float = 0.1, kv_groups: tuple[int, ...] = ()):
    """One async scheduler on a random workload with a random processing lag (1 or 2 steps);
    returns the per-step log (plans, finishes, KV state), final fields and token times.
    ``kv_groups``: hybrid KV groups (W > 0 sliding window, -C chunked)."""
    rng = random.Random(seed)
    max_len = 512
    cfg = SchedulerConfig(max_num_seqs=rng.choice([8, 64]) if budget == 256 else budget,
                          max_num_batched_tokens=budget, max_model_len=max_len)
    if kv_groups:     # the window frees are lazy events too: woken when the step moving the window is processed
        kv = HybridKVCacheManager(num_blocks, 16, max_len, tuple(abs(w) for w in kv_groups),
                                  max_in_flight_tokens(budget, 1, True), enable_prefix_caching=caching,
                                  chunked=any(w < 0 for w in kv_groups))
    else:
        kv = KVCacheManager(num_blocks, 16, max_len, enable_prefix_caching=caching)
    s = Scheduler(cfg, kv, kv_role=kv_role)
    assert s.enable_lazy_decode() if lazy else True
    prefix = tuple(rng.randrange(50) for _ in range(40))
    reqs, times, log, now, n = {}, {}, [], 0.0, 0
    pulls: list[str] = []
    queue: deque = deque()
    lag_draws = random.Random(seed + 1000)         # same processing pattern for both schedulers

    def add() -> None:
        nonlocal n
        tail = tuple(rng.randrange(50) for _ in range(rng.randint(1, 100)))
        ids = (prefix + tail) if rng.random() < 0.5 else tail
        spec = RequestSpec(f"r{n}", now, len(ids), rng.choice([3, 20, 70, 200]),
                           prompt_token_ids=ids if rng.random() < 0.7 else None)
        n += 1
        r = s.add_request(spec, remote_prefill=kv_role == "consumer" and rng.random() < 0.8)
        r.token_times_s = times[spec.request_id] = array("d", bytes(8 * spec.output_len))
        reqs[spec.request_id] = r

    def process() -> None:
        nonlocal now
        now += 0.01 * rng.randint(1, 3)
        res = s.update_from_output(queue.pop(), now)
        for r in res.token_requests:
            r.token_times_s[r.num_output_tokens - 1] = now
        log.append(("upd", res.first_token_request_ids, res.finished_request_ids))

    for _ in range(4):
        add()
    for _ in range(steps):
        if rng.random() < add_p or not s.has_requests():
            add()
        for rid in [q for q in pulls if rng.random() < 0.5]:
            pulls.remove(rid)
            s.finish_remote_kv(rid)
        out = s.schedule()
        pulls += out.remote_kv_request_ids
        log.append(("out", out, _kv_state(s)))
        queue.appendleft(out)
        if len(queue) == 2:
            process()                               # the oldest step
        if lag_draws.random() < 0.3:
            process()                               # and this one before the next schedule(): lag 1
    while queue:
        process()
    s.sync_lazy()
    fields = {rid: tuple(getattr(r, f) for f in FIELDS) for rid, r in reqs.items()}
    return log, fields, {rid: list(t) for rid, t in times.items()}


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kv_role", [None, "consumer"])
def test_lazy_equals_exact_with_a_varying_processing_lag(seed, kv_role):
    exact = _drive(seed, False, caching=True, num_blocks=400, kv_role=kv_role)
    lazy = _drive(seed, True, caching=True, num_blocks=400, kv_role=kv_role)
    assert_same_run(exact, lazy)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [9, 20, 33])
def test_lazy_equals_exact_when_the_token_budget_is_tight(seed, budget):
    """Token budget = max_num_seqs (its floor): a full running list takes it all, and a prefill
    chunk among the running requests leaves too little for the decodes after it (materialised,
    not scheduled)."""
    exact = _drive(seed, False, caching=True, num_blocks=400, budget=budget, add_p=0.3)
    lazy = _drive(seed, True, caching=True, num_blocks=400, budget=budget, add_p=0.3)
    assert exact == lazy
    outs = [e[1] for e in exact[0] if e[0] == "out"]
    assert any(o.total_num_scheduled_tokens == budget and o.num_scheduled_tokens[-1] == 1
               and max(o.num_scheduled_tokens) > 1 for o in outs)     # a chunk, decodes, budget used up


def test_a_varying_lag_needs_wake_ups(monkeypatch):
    """The workload above does make the guess late (else the wake-up would be untested)."""
    woken = []
    clear = Scheduler._schedule_running

    def spy(self, st, thr):
        woken.append(len(self._wake))
        return clear(self, st, thr)

    monkeypatch.setattr(Scheduler, "_schedule_running", spy)
    _drive(0, True, caching=True, num_blocks=400)
    assert sum(woken) > 10


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kv_groups", [(48, 0), (0, 32, 32), (-64, 0)], ids=str)
def test_lazy_hybrid_equals_exact_with_a_varying_processing_lag(seed, kv_groups):
    exact = _drive(seed, False, caching=seed % 2 == 0, num_blocks=1200, kv_groups=kv_groups)
    lazy = _drive(seed, True, caching=seed % 2 == 0, num_blocks=1200, kv_groups=kv_groups)
    assert_same_run(exact, lazy)
