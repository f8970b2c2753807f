"""The SGLang scheduler mirror (simulator/sglang_scheduler.py) against SGLang 0.5.23's real
scheduler (tests/oracle/sglang_driver.py), loop iteration by loop iteration.

Both are stepped the driver's way: iteration i first takes the requests arriving at i, then forms
a batch; the normal loop processes that batch's output in the same iteration, the overlap loop
the previous batch's. Every recorded iteration must agree on the batch (kind, extends with their
prefix hits, decodes), the retractions, the finishes, ``new_token_ratio``, and the free and
evictable token counts after it (the driver's observation points). Iterations with nothing in the
system are run (the scheduler idles, which resets the ratio) but not recorded, as the driver does.

The cases are random but seeded: a few requests (shared or unique prompts, staggered arrivals) in
small pools, under random knobs (chunk size, prefill and running caps, fcfs / lof, mixed chunk,
radix cache off, either loop, conservativeness, context length, ``ignore_eos``), also with pages of
2, 4 and 16 tokens; cases under KV
pressure (retractions); longer runs, among them the rare ones a 1,500-run search found to decide
on the rarest paths. The last test checks that the cases reach what they are meant to check
(retractions in both loops, prefix hits, chunks, mixed batches, idle resets, lof, the no-radix
``ignore_eos`` admission, prefix hits and retractions with pages above one token).
"""

from __future__ import annotations

import random

import pytest

from simulator.request import RequestSpec
from simulator.sglang_scheduler import SglangConfig, SglangScheduler

SEEDS_PER_TEST = 40
BLOCKS = 6              # 240 random cases
PAGED_BLOCKS = 2        # 80 of them again with pages of 2, 4 or 16 tokens (and 40 pressure cases)
PRESSURE_BLOCKS = 2     # 80 cases under KV pressure


def _case(seed: int):
    """(requests as (rid, ids, max_new, arrival), knobs) of one random case."""
    rng = random.Random(seed)
    pool = rng.choice([60, 100, 200, 400, 1000])
    bases = [list(range(1000 * k, 1000 * k + 300)) for k in range(3)]
    requests = []
    for i in range(rng.randint(1, 8)):
        n = rng.randint(1, min(120, pool // 3))
        ids = rng.choice(bases)[:n] if rng.random() < 0.5 else [rng.randint(5000, 9000) for _ in range(n)]
        requests.append((f"r{i}", tuple(ids), rng.randint(1, 40), rng.choice([0, 0, 1, 2, 5, 10, 30])))
    knobs = dict(max_total_tokens=pool, chunked_prefill_size=rng.choice([8192, 16, 32, 64, -1]),
                 max_prefill_tokens=rng.choice([16384, 50, 100]), max_running_requests=rng.choice([4096, 2, 3, 5]),
                 schedule_policy=rng.choice(["fcfs", "fcfs", "lof"]), enable_mixed_chunk=rng.random() < 0.3,
                 disable_radix_cache=rng.random() < 0.2, disable_overlap_schedule=rng.random() < 0.5,
                 schedule_conservativeness=rng.choice([1.0, 1.0, 0.3, 2.0]), context_length=rng.choice([32768, 200]),
                 ignore_eos=rng.random() < 0.4)
    return requests, knobs


def _paged(case):
    """``case(seed)`` with a page size of 2, 4 or 16 tokens (the pool cut to whole pages)."""
    def paged_case(seed: int):
        requests, knobs = case(seed)
        page = random.Random(7 * seed + 1).choice([2, 4, 16])
        pool = max(4 * page, knobs["max_total_tokens"] // page * page)
        return requests, dict(knobs, page_size=page, max_total_tokens=pool)
    paged_case.__name__ = f"paged {case.__name__}"
    return paged_case


def _lpm_case(seed: int):
    """A random, long or pressure case (by seed) under ``--schedule-policy lpm``, a third of them
    with pages of 2, 4 or 16 tokens."""
    requests, knobs = (_case, _long_case, _pressure_case)[seed % 3](seed)
    knobs = dict(knobs, schedule_policy="lpm")
    rng = random.Random(13 * seed + 5)
    if rng.random() < 0.3:
        page = rng.choice([2, 4, 16])
        knobs = dict(knobs, page_size=page, max_total_tokens=max(4 * page, knobs["max_total_tokens"] // page * page))
    return requests, knobs


def _long_queue_case(seed: int):
    """150 short requests at once behind two request rows: lpm matches and sorts the queue only
    while it holds at most 128 requests (above, fcfs and the waiting-prefix refresh)."""
    rng = random.Random(20_000 + seed)
    requests = [(f"q{i}", tuple(range(200 * (i % 4), 200 * (i % 4) + rng.randint(3, 40))), rng.randint(1, 6),
                 rng.choice([0, 0, 0, 5])) for i in range(150)]
    knobs = dict(max_total_tokens=400, chunked_prefill_size=64, max_prefill_tokens=16384, max_running_requests=2,
                 schedule_policy=rng.choice(["lpm", "fcfs"]), enable_mixed_chunk=False, disable_radix_cache=False,
                 disable_overlap_schedule=rng.random() < 0.5, schedule_conservativeness=1.0, context_length=32768,
                 ignore_eos=True)
    return requests, knobs


def _ignore_eos_no_radix_case(seed: int):
    """A few unique-prompt requests in a tiny pool without the radix cache, sent with ``ignore_eos``:
    SGLang's ``add_one_req_ignore_eos`` admission (every request must be able to finish with a
    token a request to spare). In a third of such cases SGLang itself never admits a request again
    (its own scheduler runs out of iterations in the driver, and so does the mirror);
    ``IGNORE_EOS_NO_RADIX_SEEDS`` are the first 40 that finish."""
    rng = random.Random(60_000 + seed)
    requests, arrival = [], 0
    for i in range(rng.randint(2, 8)):
        n = rng.randint(2, 30)
        arrival += rng.choice([0, 0, 1, 3])
        requests.append((f"e{i}", tuple(rng.randint(5000, 9000) for _ in range(n)), rng.randint(1, 40), arrival))
    knobs = dict(max_total_tokens=rng.choice([40, 60, 80, 100]), chunked_prefill_size=rng.choice([8192, 16]),
                 max_prefill_tokens=16384, max_running_requests=rng.choice([4096, 3]), schedule_policy="fcfs",
                 enable_mixed_chunk=False, disable_radix_cache=True, disable_overlap_schedule=rng.random() < 0.5,
                 schedule_conservativeness=1.0, context_length=32768, ignore_eos=True)
    return requests, knobs


IGNORE_EOS_NO_RADIX_SEEDS = (0, 1, 2, 3, 5, 6, 9, 10, 11, 13, 16, 18, 19, 21, 22, 29, 32, 33, 36, 37, 39, 40, 41, 43,
                             44, 45, 46, 47, 49, 50, 51, 52, 54, 56, 57, 58, 59, 60, 61, 62)


def _pressure_case(seed: int):
    """A case under KV pressure: a few requests with long outputs in a small pool, their running
    reservations discounted by a low ``schedule_conservativeness``, so decodes run out of slots and
    retract. (With ``ignore_eos`` the running requests reserve every output token and nothing
    retracts; without the radix cache such requests take ``add_one_req_ignore_eos``, under which
    SGLang 0.5.23 itself can leave a request waiting forever in a pool this small: the real
    scheduler never finishes some of these cases, so they are not drawn.)"""
    rng = random.Random(10_000 + seed)
    requests = []
    for i in range(rng.randint(3, 8)):
        n = rng.randint(2, 20)
        base = 3000 + 40 * (i % 3)
        ids = tuple(range(base, base + n)) if rng.random() < 0.4 else tuple(rng.randint(5000, 9000) for _ in range(n))
        requests.append((f"p{i}", ids, rng.randint(10, 60), rng.choice([0, 0, 1, 3, 8])))
    no_radix = rng.random() < 0.3
    knobs = dict(max_total_tokens=rng.choice([60, 80, 100, 150]), chunked_prefill_size=rng.choice([8192, 16, 32]),
                 max_prefill_tokens=16384, max_running_requests=rng.choice([4096, 4]),
                 schedule_policy=rng.choice(["fcfs", "lof"]), enable_mixed_chunk=rng.random() < 0.3,
                 disable_radix_cache=no_radix, disable_overlap_schedule=rng.random() < 0.5,
                 schedule_conservativeness=rng.choice([0.3, 0.5, 1.0]), context_length=32768,
                 ignore_eos=not no_radix and rng.random() < 0.3)
    return requests, knobs


def _long_case(seed: int):
    """A longer run: up to ten requests with long outputs, arriving over ~60 iterations, half of
    them sharing one prompt prefix, fcfs with the radix cache, so requests wait behind a full batch
    for dozens of iterations (the waiting queue's prefixes are refreshed in the LRU every 32nd
    admission pass) and continuing chunks meet NO_TOKEN candidates."""
    rng = random.Random(50_000 + seed)
    requests, arrival = [], 0
    for i in range(rng.randint(3, 10)):
        n = rng.randint(3, 40)
        ids = tuple(range(100, 100 + n)) if rng.random() < 0.5 else tuple(rng.randint(5000, 9000) for _ in range(n))
        arrival += rng.choice([0, 0, 1, 2, 5, 10, 20])
        requests.append((f"s{i}", ids, rng.randint(1, 80), arrival))
    knobs = dict(max_total_tokens=rng.choice([80, 100, 120, 150, 200]), chunked_prefill_size=rng.choice([8, 16, 32, 8192]),
                 max_prefill_tokens=16384, max_running_requests=rng.choice([4096, 2, 3]), schedule_policy="fcfs",
                 enable_mixed_chunk=rng.random() < 0.3, disable_radix_cache=False,
                 disable_overlap_schedule=rng.random() < 0.5, schedule_conservativeness=rng.choice([0.3, 1.0]),
                 context_length=32768, ignore_eos=rng.random() < 0.5)
    return requests, knobs


# Long runs that decide on the rarest paths (each is the only one of 1,500 long runs whose steps
# change when the mirror skips that path): a candidate matched after a continuing chunk left the
# pass with NO_TOKEN (246, 700: the miss marks the batch full); the waiting queue's prefix refresh
# deciding an eviction (376).
RARE_LONG_SEEDS = (246, 700, 376)
LONG_SEEDS = tuple(range(SEEDS_PER_TEST)) + RARE_LONG_SEEDS


def _all_cases():
    return ([_case(seed) for seed in range(BLOCKS * SEEDS_PER_TEST)]
            + [_paged(_case)(seed) for seed in range(PAGED_BLOCKS * SEEDS_PER_TEST)]
            + [_paged(_pressure_case)(seed) for seed in range(SEEDS_PER_TEST)]
            + [_pressure_case(seed) for seed in range(PRESSURE_BLOCKS * SEEDS_PER_TEST)]
            + [_long_case(seed) for seed in LONG_SEEDS]
            + [_lpm_case(seed) for seed in range(SEEDS_PER_TEST)]
            + [_long_queue_case(seed) for seed in range(4)]
            + [_ignore_eos_no_radix_case(seed) for seed in IGNORE_EOS_NO_RADIX_SEEDS])


def _oracle(driver, requests, knobs) -> list[tuple]:
    steps = driver.run_sglang_scheduler([driver.SglRequest(*r) for r in requests], **knobs)
    return [(s.kind, s.extend, s.decode, s.retracted, s.finished, round(s.new_token_ratio, 9), s.available_tokens,
             s.evictable_tokens) for s in steps]


def _mirror(requests, knobs) -> list[tuple]:
    """The mirror stepped as the driver steps SGLang's loops (module docstring)."""
    k = dict(knobs)
    pool = k.pop("max_total_tokens")
    config = SglangConfig(max_total_tokens=pool, context_length=k.pop("context_length"),
                          max_running_requests=min(k.pop("max_running_requests"), pool // 2), **k)
    sched = SglangScheduler(config)
    overlap = not config.disable_overlap_schedule
    pending = sorted(requests, key=lambda r: r[3])
    steps, queue = [], []
    for it in range(10_000):
        while pending and pending[0][3] <= it:
            rid, ids, max_new, _ = pending.pop(0)
            req = sched.add_request(RequestSpec(rid, 0.0, len(ids), max_new, prompt_token_ids=ids), idle_spun=False)
            assert not isinstance(req, str), req
        busy = sched.has_requests() or bool(queue)
        if not busy and not pending:
            return steps
        out = sched.schedule()
        ratio = sched.new_token_ratio
        ran = out.total_num_scheduled_tokens > 0
        if not ran:
            sched._in_flight.pop()          # nothing launched
        if not busy:
            continue                        # an idle iteration: run, not recorded
        if ran:
            queue.append(out)
        finished = ()
        if queue and (not overlap or queue[0] is not out):
            finished = sched.update_from_output(queue.pop(0), 0.0).finished_request_ids
        batch = sched.last_batch
        extend = tuple((r.request_id, end - ctx, ctx) for r, end, ctx in
                       zip(batch.extend, batch.ends, out.context_lens)) if ran else ()
        decode = tuple(r.request_id for r in batch.decode) if ran else ()
        kind = "idle" if not ran else "mixed" if extend and decode else "prefill" if extend else "decode"
        steps.append((kind, extend, decode, out.preempted_request_ids, tuple(sorted(finished)), round(ratio, 9),
                      sched.pool.available, sched.evictable_size()))
    raise AssertionError("the mirror did not finish in 10,000 iterations")


def _admission_order(steps: list[tuple]) -> list[str]:
    """Request ids in the order of their first extend."""
    seen: list[str] = []
    for step in steps:
        seen += [rid for rid, _, _ in step[1] if rid not in seen]
    return seen


def _first_difference(oracle: list[tuple], mirror: list[tuple]) -> str | None:
    for i, (o, m) in enumerate(zip(oracle, mirror)):
        if o != m:
            return f"iteration {i}:\n  SGLang {o}\n  mirror {m}\n  before {oracle[i - 1] if i else None}"
    if len(oracle) != len(mirror):
        return f"SGLang recorded {len(oracle)} iterations, the mirror {len(mirror)}"
    return None


def _assert_same(driver, make_case, seeds) -> None:
    for seed in seeds:
        requests, knobs = make_case(seed)
        diff = _first_difference(_oracle(driver, requests, knobs), _mirror(requests, knobs))
        assert diff is None, f"{make_case.__name__}({seed}) {knobs}\n{requests}\n{diff}"


@pytest.mark.parametrize("block", range(BLOCKS))
def test_random_cases_step_for_step(sglang_driver, block):
    _assert_same(sglang_driver, _case, range(block * SEEDS_PER_TEST, (block + 1) * SEEDS_PER_TEST))


@pytest.mark.parametrize("block", range(PAGED_BLOCKS))
def test_paged_cases_step_for_step(sglang_driver, block):
    _assert_same(sglang_driver, _paged(_case), range(block * SEEDS_PER_TEST, (block + 1) * SEEDS_PER_TEST))


def test_paged_cases_under_kv_pressure_step_for_step(sglang_driver):
    _assert_same(sglang_driver, _paged(_pressure_case), range(SEEDS_PER_TEST))


@pytest.mark.parametrize("block", range(PRESSURE_BLOCKS))
def test_cases_under_kv_pressure_step_for_step(sglang_driver, block):
    _assert_same(sglang_driver, _pressure_case, range(block * SEEDS_PER_TEST, (block + 1) * SEEDS_PER_TEST))


def test_long_runs_step_for_step(sglang_driver):
    _assert_same(sglang_driver, _long_case, LONG_SEEDS)


def test_ignore_eos_admission_without_the_radix_cache_step_for_step(sglang_driver):
    _assert_same(sglang_driver, _ignore_eos_no_radix_case, IGNORE_EOS_NO_RADIX_SEEDS)


def test_lpm_step_for_step(sglang_driver):
    _assert_same(sglang_driver, _lpm_case, range(SEEDS_PER_TEST))
    _assert_same(sglang_driver, _long_queue_case, range(4))


def test_the_cases_reach_what_they_check():
    """Over all the cases: retractions (in either loop, and a re-prefill with a prefix hit after
    one), prefix hits, cut chunks, mixed batches, ratio resets by the idle loop, both loops, lof,
    and the no-radix ignore_eos admission all occur."""
    seen = {k: 0 for k in ("retraction", "retraction_overlap", "retraction_normal", "prefix_hit", "chunk", "mixed",
                           "overlap", "normal", "idle_reset", "no_radix_ignore_eos", "lof", "paged_prefix_hit",
                           "paged_retraction", "lpm_reordered")}
    for requests, knobs in _all_cases():
        steps = _mirror(requests, knobs)
        retracted = any(s[3] for s in steps)
        seen["retraction"] += retracted
        seen["retraction_overlap" if not knobs["disable_overlap_schedule"] else "retraction_normal"] += retracted
        seen["prefix_hit"] += any(p > 0 for s in steps for _, _, p in s[1])
        seen["chunk"] += any(n < len(ids) for s in steps for rid, n, p in s[1] for r, ids, _, _ in requests
                             if r == rid and p == 0)
        seen["mixed"] += any(s[0] == "mixed" for s in steps)
        seen["overlap" if not knobs["disable_overlap_schedule"] else "normal"] += 1
        init = min(0.7 * knobs["schedule_conservativeness"], 1.0)
        seen["idle_reset"] += any(a[5] < init and b[0] != "idle" and b[5] == init and not b[3]
                                  for a, b in zip(steps, steps[1:]))
        seen["no_radix_ignore_eos"] += knobs["disable_radix_cache"] and knobs["ignore_eos"]
        seen["lof"] += knobs["schedule_policy"] == "lof"
        seen["lpm_reordered"] += knobs["schedule_policy"] == "lpm" and _admission_order(steps) != sorted(
            _admission_order(steps), key=lambda rid: [r[0] for r in requests].index(rid))
        paged = knobs.get("page_size", 1) > 1
        seen["paged_prefix_hit"] += paged and any(p > 0 for s in steps for _, _, p in s[1])
        seen["paged_retraction"] += paged and retracted
    assert all(n >= 5 for n in seen.values()), seen
