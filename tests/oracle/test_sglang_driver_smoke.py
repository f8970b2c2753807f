"""The SGLang driver alone: tiny cases whose step sequences were derived by hand from
engine-semantics §7 and SGLang 0.5.23's source, then checked against the driver.

Arithmetic used throughout (page_size 1 unless said otherwise):
- ratio: init = min(0.7 * conservativeness, 1), min = init * 0.14, decay = (init - min) / 600,
  one decay per decode step that did not retract (none on prefill or mixed steps); after a
  retraction ratio = min(1, (Σ outputs + 20 * n) / (Σ max_new + 1)) over the n kept requests.
- admission: total = extend + min(max_new - outputs, 4096) + page < available + evictable
  - Σ_running (max_new - outputs) * ratio - Σ_admitted_this_pass (ceil(extend) + page + max_new).
- a prefill's prompt is checkpointed into the radix tree right after that prefill (locked
  while the request runs); on finish prompt + outputs[:-1] (the KV that exists) are inserted.
- the fake model samples token 0 for everyone, so equal prompts also share their outputs.
"""

from __future__ import annotations

import pytest


def _ids(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


class _Ratio:
    """SGLang's NewTokenRatioTracker arithmetic, float for float."""

    def __init__(self, conservativeness: float = 1.0) -> None:
        self.init = min(0.7 * conservativeness, 1.0)
        self.min = min(self.init * 0.14, 1.0)
        self.decay = (self.init - self.min) / 600
        self.current = self.init

    def step(self) -> float:
        self.current = max(self.current - self.decay, self.min)
        return self.current

    def set(self, value: float) -> float:
        self.current = value
        return value


@pytest.fixture()
def step(sglang_driver):
    def make(kind, extend=(), decode=(), retracted=(), finished=(), *, ratio, avail, evict):
        return sglang_driver.SglStep(
            kind=kind,
            extend=tuple(extend),
            decode=tuple(decode),
            retracted=tuple(retracted),
            finished=tuple(finished),
            new_token_ratio=ratio,
            available_tokens=avail,
            evictable_tokens=evict,
        )

    return make


def _run(driver, requests, **knobs):
    reqs = [driver.SglRequest(*r) if isinstance(r, tuple) else r for r in requests]
    return driver.run_sglang_scheduler(reqs, **knobs)


def test_one_request_prefill_then_decodes(sglang_driver, step):
    # 10-token prompt, 3 outputs: the prefill samples token 1, two decodes sample 2 and 3.
    # KV: 10 prompt + 2 decode inputs = 12 slots; on finish all 12 stay in the tree.
    r = _Ratio()
    steps = _run(sglang_driver, [("a", _ids(1, 10), 3)], max_total_tokens=1000)
    assert steps == [
        step("prefill", [("a", 10, 0)], ratio=0.7, avail=990, evict=0),
        step("decode", decode=["a"], ratio=r.step(), avail=989, evict=0),
        step("decode", decode=["a"], finished=["a"], ratio=r.step(), avail=988, evict=12),
    ]
    assert steps[-1].available_tokens + steps[-1].evictable_tokens == 1000


def test_chunked_prefill_runs_alone_while_decodes_wait(sglang_driver, step):
    # b (5 tokens, 6 outputs) is decoding when r (100 tokens, 2 outputs) arrives at step 2:
    # r's chunks 32, 32, 32, 4 each form a prefill batch ("prefill first"), b stalls; then
    # both decode (running batch order: b, then the merged r).
    r = _Ratio()
    steps = _run(
        sglang_driver,
        [("b", _ids(1000, 5), 6), ("r", _ids(1, 100), 2, 2)],
        max_total_tokens=1000,
        chunked_prefill_size=32,
    )
    r1 = r.step()
    assert steps == [
        step("prefill", [("b", 5, 0)], ratio=0.7, avail=995, evict=0),
        step("decode", decode=["b"], ratio=r1, avail=994, evict=0),
        step("prefill", [("r", 32, 0)], ratio=r1, avail=962, evict=0),
        step("prefill", [("r", 32, 32)], ratio=r1, avail=930, evict=0),
        step("prefill", [("r", 32, 64)], ratio=r1, avail=898, evict=0),
        step("prefill", [("r", 4, 96)], ratio=r1, avail=894, evict=0),
        step("decode", decode=["b", "r"], finished=["r"], ratio=r.step(), avail=892, evict=101),
        step("decode", decode=["b"], ratio=r.step(), avail=891, evict=101),
        step("decode", decode=["b"], ratio=r.step(), avail=890, evict=101),
        step("decode", decode=["b"], finished=["b"], ratio=r.step(), avail=889, evict=111),
    ]


def test_last_chunk_shares_the_batch_with_new_requests(sglang_driver, step):
    # Both arrive at step 0: r is chunked first (rem_chunk_tokens 32 is spent), its last
    # chunk (4) leaves 28 tokens of chunk budget, and b (5) joins that batch.
    r = _Ratio()
    steps = _run(
        sglang_driver,
        [("r", _ids(1, 100), 2), ("b", _ids(1000, 5), 6)],
        max_total_tokens=1000,
        chunked_prefill_size=32,
    )
    assert steps == [
        step("prefill", [("r", 32, 0)], ratio=0.7, avail=968, evict=0),
        step("prefill", [("r", 32, 32)], ratio=0.7, avail=936, evict=0),
        step("prefill", [("r", 32, 64)], ratio=0.7, avail=904, evict=0),
        step("prefill", [("r", 4, 96), ("b", 5, 0)], ratio=0.7, avail=895, evict=0),
        step("decode", decode=["r", "b"], finished=["r"], ratio=r.step(), avail=893, evict=101),
        step("decode", decode=["b"], ratio=r.step(), avail=892, evict=101),
        step("decode", decode=["b"], ratio=r.step(), avail=891, evict=101),
        step("decode", decode=["b"], ratio=r.step(), avail=890, evict=101),
        step("decode", decode=["b"], finished=["b"], ratio=r.step(), avail=889, evict=111),
    ]


@pytest.mark.parametrize("pool, b_admitted_at", [(62, 1), (63, 0)])
def test_admission_is_strictly_below_the_remaining_budget(sglang_driver, pool, b_admitted_at):
    # a and b: 10 tokens, 20 outputs: total = 10 + 20 + 1 = 31 each. Step 0: a takes 31 of
    # the budget; b needs 31 < pool - 31: not with 62 (NO_TOKEN), yes with 63. With 62, b
    # gets in at step 1: 31 < (62 - 10) - (20 - 1) * 0.7 = 38.7. (The NO_TOKEN latch set on
    # the empty running batch at step 0 does not survive: step 1's running batch is a's
    # prefill batch.)
    steps = _run(
        sglang_driver,
        [("a", _ids(100, 10), 20), ("b", _ids(200, 10), 20)],
        max_total_tokens=pool,
    )
    admitted = {rid: i for i, s in enumerate(steps) for rid, _, _ in s.extend}
    assert admitted == {"a": 0, "b": b_admitted_at}


def test_admission_budget_uses_new_token_ratio_for_running_requests(sglang_driver, step):
    # Pool 80, three 10-token prompts with 20 outputs (total 31 each). Step 0: a, b fit
    # (31 < 80, 31 < 49), c does not (31 < 18 is false: NO_TOKEN). Step 1: the running a, b
    # reserve only (20 - 1) * 0.7 each, so c fits: 31 < 60 - 26.6.
    reqs = [("a", _ids(100, 10), 20), ("b", _ids(200, 10), 20), ("c", _ids(300, 10), 20)]
    steps = _run(sglang_driver, reqs, max_total_tokens=80)
    assert steps[:2] == [
        step("prefill", [("a", 10, 0), ("b", 10, 0)], ratio=0.7, avail=60, evict=0),
        step("prefill", [("c", 10, 0)], ratio=0.7, avail=50, evict=0),
    ]
    # schedule_conservativeness 2: ratio starts at min(1.4, 1) = 1, the running requests
    # reserve all their remaining tokens and c waits until a and b finish (step 19: 20
    # outputs each; 60 - 2 * 19 = 22 free, 2 * (10 + 19) = 58 in the tree).
    r = _Ratio(2.0)
    steps = _run(sglang_driver, reqs, max_total_tokens=80, schedule_conservativeness=2.0)
    ratios = [r.step() for _ in range(19)]
    assert steps[0] == step("prefill", [("a", 10, 0), ("b", 10, 0)], ratio=1.0, avail=60, evict=0)
    assert steps[1:20] == [
        step("decode", decode=["a", "b"], finished=["a", "b"] if k == 19 else [],
             ratio=ratios[k - 1], avail=60 - 2 * k, evict=58 if k == 19 else 0)
        for k in range(1, 20)
    ]
    assert steps[20] == step("prefill", [("c", 10, 0)], ratio=ratios[-1], avail=12, evict=58)
    assert len(steps) == 40 and steps[-1].finished == ("c",)


def test_no_token_latches_admission_until_a_running_request_leaves(sglang_driver, step):
    # a runs alone from step 0; b and c arrive at step 1: b fits (31 < 70 - 19 * 0.7), c
    # does not (31 < 56.7 - 31): NO_TOKEN marks the (non-empty) running batch full. From
    # step 2 on c would fit (31 < 60 - 2 * 19 * 0.7 = 33.4), but no prefill pass runs while
    # the batch is marked full: c waits until a and b finish at step 20.
    r = _Ratio()
    steps = _run(
        sglang_driver,
        [("a", _ids(100, 10), 20), ("b", _ids(200, 10), 20, 1), ("c", _ids(300, 10), 20, 1)],
        max_total_tokens=80,
    )
    ratios = [r.step() for _ in range(38)]
    assert steps[:2] == [
        step("prefill", [("a", 10, 0)], ratio=0.7, avail=70, evict=0),
        step("prefill", [("b", 10, 0)], ratio=0.7, avail=60, evict=0),
    ]
    assert steps[2:21] == [
        step("decode", decode=["a", "b"], finished=["a", "b"] if k == 20 else [],
             ratio=ratios[k - 2], avail=60 - 2 * (k - 1), evict=58 if k == 20 else 0)
        for k in range(2, 21)
    ]
    assert steps[21] == step("prefill", [("c", 10, 0)], ratio=ratios[18], avail=12, evict=58)
    # c decodes alone; at step 34 no slot is free: the decode check evicts the LRU leaf,
    # a's 19 decode tokens.
    assert steps[22:] == [
        step("decode", decode=["c"], finished=["c"] if k == 40 else [], ratio=ratios[k - 3],
             avail=12 - (k - 21) if k < 34 else 18 - (k - 34),
             evict=58 if k < 34 else 68 if k == 40 else 39)
        for k in range(22, 41)
    ]


def test_radix_prefix_hit_after_the_first_request_finished(sglang_driver, step):
    # a (30 tokens) finishes, leaving 31 tokens in the tree. b shares a's first 20 tokens:
    # prefix 20, extend 10. c is a's prompt again: the hit is capped at input_len - 1 = 29.
    # Iterations with nothing in the system (waiting for b, c) are not recorded; on_idle
    # resets the ratio to 0.7 there.
    r = _Ratio()
    r1 = r.step()
    steps = _run(
        sglang_driver,
        [
            ("a", _ids(1, 30), 2),
            ("b", _ids(1, 20) + _ids(500, 10), 2, 5),
            ("c", _ids(1, 30), 2, 8),
        ],
        max_total_tokens=1000,
    )
    assert steps == [
        step("prefill", [("a", 30, 0)], ratio=0.7, avail=970, evict=0),
        step("decode", decode=["a"], finished=["a"], ratio=r1, avail=969, evict=31),
        # b locks the 20 shared tokens: 31 - 20 of a's stay evictable
        step("prefill", [("b", 10, 20)], ratio=0.7, avail=959, evict=11),
        step("decode", decode=["b"], finished=["b"], ratio=r1, avail=958, evict=42),
        # c's one new token duplicates a's tree token: its slot is freed at the checkpoint
        step("prefill", [("c", 1, 29)], ratio=0.7, avail=958, evict=12),
        step("decode", decode=["c"], finished=["c"], ratio=r1, avail=958, evict=42),
    ]


def test_a_running_requests_prompt_is_already_shared(sglang_driver, step):
    # a is still decoding when b arrives: a's prompt was inserted into the tree right after
    # its prefill, so b hits 20 tokens. On finish b leaves its own 11 tokens evictable (the
    # shared 20 stay locked by a); a's finish adds its 34.
    r = _Ratio()
    steps = _run(
        sglang_driver,
        [("a", _ids(1, 30), 5), ("b", _ids(1, 20) + _ids(500, 10), 2, 2)],
        max_total_tokens=1000,
    )
    r1 = r.step()
    assert steps == [
        step("prefill", [("a", 30, 0)], ratio=0.7, avail=970, evict=0),
        step("decode", decode=["a"], ratio=r1, avail=969, evict=0),
        step("prefill", [("b", 10, 20)], ratio=r1, avail=959, evict=0),
        step("decode", decode=["a", "b"], finished=["b"], ratio=r.step(), avail=957, evict=11),
        step("decode", decode=["a"], ratio=r.step(), avail=956, evict=11),
        step("decode", decode=["a"], finished=["a"], ratio=r.step(), avail=955, evict=45),
    ]


def test_identical_prompts_in_one_batch_are_deduplicated_after_the_prefill(sglang_driver, step):
    # No sharing within a prefill batch: both extend 30 tokens (60 slots). The checkpoint
    # after the prefill finds b's prompt already inserted by a and frees b's 30 slots.
    steps = _run(
        sglang_driver,
        [("a", _ids(1, 30), 2), ("b", _ids(1, 30), 2)],
        max_total_tokens=1000,
    )
    assert steps == [
        step("prefill", [("a", 30, 0), ("b", 30, 0)], ratio=0.7, avail=970, evict=0),
        step("decode", decode=["a", "b"], finished=["a", "b"], ratio=_Ratio().step(), avail=969, evict=31),
    ]


def test_retraction_victim_ties_go_to_the_longest_input_and_requeue_at_the_tail(sglang_driver, step):
    # Pool 80, 20 outputs each. Step 0: a (9) and b (12) fit (30 + 33 of 80), c (10) does
    # not; step 1: c fits (31 < 59 - 2 * 19 * 0.7). From step 2, 3 tokens per decode:
    # 49 - 3 * 16 = 1 free before step 18, so step 18 retracts. All three have 17 outputs:
    # the tie goes to the longest input, b (not the last in batch order). Its 16 decode
    # slots are freed, its prompt (12, in the tree) unlocked and evicted (free 17 < 20 * 2).
    # Ratio: min(1, (17 + 17 + 20 * 2) / (20 + 20 + 1)) = 1.
    # d (6 tokens, 10 outputs) arrived at step 3 and hit NO_TOKEN (17 < 46 - 3 * 18 * 0.699
    # is false), so it is queued ahead of the retracted b: step 19 admits d
    # (17 < 27 - 2 * 2 * 1.0), not b (29 + 3 + 1 = 33). b re-prefills its 12 + 17 tokens
    # once a and c finish (its prompt was evicted: prefix 0), evicting a's 19-token leaf.
    r = _Ratio()
    steps = _run(
        sglang_driver,
        [
            ("a", _ids(100, 9), 20),
            ("b", _ids(200, 12), 20),
            ("c", _ids(300, 10), 20),
            ("d", _ids(400, 6), 10, 3),
        ],
        max_total_tokens=80,
    )
    expected = [
        step("prefill", [("a", 9, 0), ("b", 12, 0)], ratio=0.7, avail=59, evict=0),
        step("prefill", [("c", 10, 0)], ratio=0.7, avail=49, evict=0),
    ]
    expected += [
        step("decode", decode=["a", "b", "c"], ratio=r.step(), avail=49 - 3 * (k - 1), evict=0)
        for k in range(2, 18)
    ]
    expected += [
        step("decode", decode=["a", "c"], retracted=["b"], ratio=r.set(1.0), avail=27, evict=0),
        step("prefill", [("d", 6, 0)], ratio=1.0, avail=21, evict=0),
        step("decode", decode=["a", "c", "d"], ratio=r.step(), avail=18, evict=0),
        step("decode", decode=["a", "c", "d"], finished=["a", "c"], ratio=r.step(), avail=15, evict=57),
        step("prefill", [("b", 29, 0)], ratio=r.current, avail=5, evict=38),
        step("decode", decode=["d", "b"], ratio=r.step(), avail=3, evict=38),
        step("decode", decode=["d", "b"], finished=["b"], ratio=r.step(), avail=1, evict=69),
        step("decode", decode=["d"], ratio=r.step(), avail=0, evict=69),
        # out of free slots: the decode check evicts a's 9-token prompt leaf (LRU)
        step("decode", decode=["d"], ratio=r.step(), avail=8, evict=60),
        step("decode", decode=["d"], ratio=r.step(), avail=7, evict=60),
        step("decode", decode=["d"], ratio=r.step(), avail=6, evict=60),
        step("decode", decode=["d"], finished=["d"], ratio=r.step(), avail=5, evict=75),
    ]
    assert steps == expected


def test_retraction_takes_the_fewest_outputs_and_reorders_the_batch(sglang_driver):
    # c arrives at step 2, after a and b decoded once, so at the step-18 retraction it has
    # 16 outputs to their 17: c goes, although a has the longest input. retract_decode keeps
    # the rest in its preference order (outputs, then longest input... reversed: b (9) sorts
    # before a (12)), so the batch becomes [b, a].
    steps = _run(
        sglang_driver,
        [("a", _ids(100, 12), 20), ("b", _ids(200, 9), 20), ("c", _ids(300, 10), 20, 2)],
        max_total_tokens=80,
    )
    assert [(i, s.decode, s.retracted) for i, s in enumerate(steps) if s.retracted] == [
        (18, ("b", "a"), ("c",))
    ]
    assert steps[17].decode == ("a", "b", "c") and steps[19].decode == ("b", "a")
    assert steps[18].new_token_ratio == 1.0 and steps[18].available_tokens == 25


def test_retraction_ratio_formula_and_reprefill_with_prefix_hit(sglang_driver, step):
    # schedule_conservativeness 0.3: ratio starts at 0.21. Pool 300, prompts 20, 120 outputs.
    # Step 0: a, b (141 + 141 < 300); step 1: c (141 < 260 - 2 * 119 * 0.21). Then 3 tokens
    # per decode: 240 - 3 * 80 = 0 free before step 82 -> retract. All have 81 outputs and
    # 20 input tokens: the last in batch order, c, goes. Its 80 decode slots are freed, its
    # prompt stays in the tree (free 80 >= 20 * 2). Ratio (81 + 81 + 40) / (120 + 120 + 1).
    # c re-prefills 81 tokens (20 + 81 - 20 cached) after a and b finish at step 120,
    # evicting one 119-token leaf.
    r = _Ratio(0.3)
    steps = _run(
        sglang_driver,
        [("a", _ids(100, 20), 120), ("b", _ids(200, 20), 120), ("c", _ids(300, 20), 120)],
        max_total_tokens=300,
        schedule_conservativeness=0.3,
    )
    expected = [
        step("prefill", [("a", 20, 0), ("b", 20, 0)], ratio=0.21, avail=260, evict=0),
        step("prefill", [("c", 20, 0)], ratio=0.21, avail=240, evict=0),
    ]
    expected += [
        step("decode", decode=["a", "b", "c"], ratio=r.step(), avail=240 - 3 * (k - 1), evict=0)
        for k in range(2, 82)
    ]
    expected.append(
        step("decode", decode=["a", "b"], retracted=["c"], ratio=r.set(202 / 241), avail=78, evict=20)
    )
    expected += [
        step("decode", decode=["a", "b"], finished=["a", "b"] if k == 120 else [],
             ratio=r.step(), avail=78 - 2 * (k - 82), evict=298 if k == 120 else 20)
        for k in range(83, 121)
    ]
    expected.append(step("prefill", [("c", 81, 20)], ratio=r.current, avail=40, evict=159))
    expected += [
        step("decode", decode=["c"], finished=["c"] if k == 159 else [],
             ratio=r.step(), avail=40 - (k - 121), evict=298 if k == 159 else 159)
        for k in range(122, 160)
    ]
    assert steps == expected


def test_mixed_chunk_runs_decodes_inside_the_prefill_batch(sglang_driver, step):
    # --enable-mixed-chunk: b keeps decoding while r is chunked; each mixed step's chunk is
    # 32 - 1 (the running batch size) = 31 tokens. No ratio decay on mixed steps.
    r = _Ratio()
    r1 = r.step()
    steps = _run(
        sglang_driver,
        [("b", _ids(1000, 5), 6), ("r", _ids(1, 100), 2, 2)],
        max_total_tokens=1000,
        chunked_prefill_size=32,
        enable_mixed_chunk=True,
    )
    assert steps == [
        step("prefill", [("b", 5, 0)], ratio=0.7, avail=995, evict=0),
        step("decode", decode=["b"], ratio=r1, avail=994, evict=0),
        step("mixed", [("r", 31, 0)], ["b"], ratio=r1, avail=962, evict=0),
        step("mixed", [("r", 31, 31)], ["b"], ratio=r1, avail=930, evict=0),
        step("mixed", [("r", 31, 62)], ["b"], ratio=r1, avail=898, evict=0),
        # b's 6th output: it finishes inside the mixed step (5 + 5 tokens to the tree)
        step("mixed", [("r", 7, 93)], ["b"], finished=["b"], ratio=r1, avail=890, evict=10),
        step("decode", decode=["r"], finished=["r"], ratio=r.step(), avail=889, evict=111),
    ]


def test_overlap_mode_sees_results_one_iteration_late(sglang_driver, step):
    # event_loop_overlap: iteration N launches batch N, then processes batch N-1's result.
    # The last decode is not followed by another one (the in-flight token finishes a), and
    # a's finish is processed in a final idle iteration. Compare the normal-mode trace of
    # test_one_request_prefill_then_decodes.
    r = _Ratio()
    r1, r2 = r.step(), r.step()
    steps = _run(
        sglang_driver,
        [("a", _ids(1, 10), 3)],
        max_total_tokens=1000,
        disable_overlap_schedule=False,
    )
    assert steps == [
        step("prefill", [("a", 10, 0)], ratio=0.7, avail=990, evict=0),
        step("decode", decode=["a"], ratio=r1, avail=989, evict=0),
        step("decode", decode=["a"], ratio=r2, avail=988, evict=0),
        step("idle", finished=["a"], ratio=r2, avail=988, evict=12),
    ]


@pytest.mark.parametrize("overlap", [False, True])
def test_overlap_skips_requests_finishing_in_flight(sglang_driver, step, overlap):
    # a: 2 outputs, b: 4. Normal: a's 2nd token is processed at step 1 (finish) and step 2
    # decodes b alone. Overlap: step 2 is formed before step 1's result is processed; a's
    # in-flight token will finish it (_reqs_finishing_inflight), so step 2 decodes b alone
    # too, and a's finish shows at step 2 instead of step 1.
    r = _Ratio()
    ratios = [r.step() for _ in range(3)]
    steps = _run(
        sglang_driver,
        [("a", _ids(100, 4), 2), ("b", _ids(200, 4), 4)],
        max_total_tokens=100,
        disable_overlap_schedule=not overlap,
    )
    prefill = step("prefill", [("a", 4, 0), ("b", 4, 0)], ratio=0.7, avail=92, evict=0)
    if not overlap:
        assert steps == [
            prefill,
            step("decode", decode=["a", "b"], finished=["a"], ratio=ratios[0], avail=90, evict=5),
            step("decode", decode=["b"], ratio=ratios[1], avail=89, evict=5),
            step("decode", decode=["b"], finished=["b"], ratio=ratios[2], avail=88, evict=12),
        ]
    else:
        assert steps == [
            prefill,
            step("decode", decode=["a", "b"], ratio=ratios[0], avail=90, evict=0),
            step("decode", decode=["b"], finished=["a"], ratio=ratios[1], avail=89, evict=5),
            step("decode", decode=["b"], ratio=ratios[2], avail=88, evict=5),
            step("idle", finished=["b"], ratio=ratios[2], avail=88, evict=12),
        ]


def test_disable_radix_cache_gives_no_prefix_hits(sglang_driver, step):
    # Same requests as the prefix test: no hit for b, and nothing stays cached.
    r1 = _Ratio().step()
    steps = _run(
        sglang_driver,
        [("a", _ids(1, 30), 2), ("b", _ids(1, 20) + _ids(500, 10), 2, 5)],
        max_total_tokens=1000,
        disable_radix_cache=True,
    )
    assert steps == [
        step("prefill", [("a", 30, 0)], ratio=0.7, avail=970, evict=0),
        step("decode", decode=["a"], finished=["a"], ratio=r1, avail=1000, evict=0),
        step("prefill", [("b", 30, 0)], ratio=0.7, avail=970, evict=0),
        step("decode", decode=["b"], finished=["b"], ratio=r1, avail=1000, evict=0),
    ]


def test_page_size_16_allocates_and_caches_whole_pages(sglang_driver, step):
    # 40-token prompt, chunk 32: pages 2 + 1; the decodes stay in page 3. On finish 42 KV
    # tokens exist; the tree keeps the 2 full pages, the partial page is freed. b = a's
    # prompt: the hit (capped at 39) is cut to 32, a page multiple.
    r = _Ratio()
    r1, r2 = r.step(), r.step()
    steps = _run(
        sglang_driver,
        [("a", _ids(1, 40), 3), ("b", _ids(1, 40), 3, 6)],
        max_total_tokens=320,
        page_size=16,
        chunked_prefill_size=32,
    )
    assert steps == [
        step("prefill", [("a", 32, 0)], ratio=0.7, avail=288, evict=0),
        step("prefill", [("a", 8, 32)], ratio=0.7, avail=272, evict=0),
        step("decode", decode=["a"], ratio=r1, avail=272, evict=0),
        step("decode", decode=["a"], finished=["a"], ratio=r2, avail=288, evict=32),
        step("prefill", [("b", 8, 32)], ratio=0.7, avail=272, evict=0),
        step("decode", decode=["b"], ratio=r1, avail=272, evict=0),
        step("decode", decode=["b"], finished=["b"], ratio=r2, avail=288, evict=32),
    ]


def test_max_new_tokens_is_clipped_to_the_pool_at_arrival(sglang_driver, step):
    # Scheduler.init_req_max_new_tokens: min(100, max_req_len - 10 - 1, 64 - 10 - 1 - 1)
    # with max_req_len = min(context - 1, 64 - 1) = 63: 52 outputs, i.e. 1 prefill + 51
    # decodes; 10 + 51 KV tokens end in the tree.
    steps = _run(sglang_driver, [("a", _ids(1, 10), 100)], max_total_tokens=64)
    assert len(steps) == 52 and [s.kind for s in steps[1:]] == ["decode"] * 51
    assert steps[-1].finished == ("a",)
    assert (steps[-1].available_tokens, steps[-1].evictable_tokens) == (3, 61)


def test_without_chunking_max_prefill_tokens_admits_one_oversized_request(sglang_driver, step):
    # chunked_prefill_size -1: no chunking; max_prefill_tokens 120 bounds the pass: after
    # a (100), b (50) is not below the 20 left, so it waits for the next step.
    steps = _run(
        sglang_driver,
        [("a", _ids(1, 100), 2), ("b", _ids(1000, 50), 2)],
        max_total_tokens=1000,
        chunked_prefill_size=-1,
        max_prefill_tokens=120,
    )
    assert steps == [
        step("prefill", [("a", 100, 0)], ratio=0.7, avail=900, evict=0),
        step("prefill", [("b", 50, 0)], ratio=0.7, avail=850, evict=0),
        step("decode", decode=["a", "b"], finished=["a", "b"], ratio=_Ratio().step(), avail=848, evict=152),
    ]


def test_rejects_what_sglang_rejects(sglang_driver):
    # input_len >= max_req_input_len = min(context, pool) - 1 - 5
    with pytest.raises(RuntimeError, match="rejected"):
        _run(sglang_driver, [("a", _ids(1, 60), 2)], max_total_tokens=64)
    with pytest.raises(ValueError, match="multiple of page_size"):
        _run(sglang_driver, [("a", _ids(1, 6), 2)], max_total_tokens=100, page_size=16)
