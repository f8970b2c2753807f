"""Step-pricing fast paths give exactly the floats of the plain computations.

* ``timeline_totals`` (the F-bound chain of ``_run_layers``) equals the per-item loop of
  ``afd_timeline`` on random inputs, including inputs built to sit on the fast path's
  boundaries (ties, zero margins, coarse float grids, large start times);
* decode-only attention from the contexts' count and sum (``BatchEngine.attention_time_s``
  under the roofline) equals pricing the ``AttentionOp`` built for the batch.
"""

import random

import simulator.afd as afd
from frontier.ops import AttentionOp
from simulator.afd import afd_timeline, timeline_totals
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from test_batch_engine import H100, LLAMA_8B, MLA, MOE, engine


def _plain(runs, head, tail):
    a, s, f, r = ([row for run in runs for row in [run[i]] * run[0]] for i in range(1, 5))
    return afd_timeline(a, s, f, r, head, tail)


def _same(runs, head, tail, count=None):
    full = _plain(runs, head, tail)            # the reference: the recurrence item by item
    if count:
        count.on = True
    fast = timeline_totals(runs, head, tail)
    if count:
        count.on = False
    assert (fast.end_s, fast.a_busy_s, fast.f_busy_s, fast.xfer_s) == \
        (full.end_s, full.a_busy_s, full.f_busy_s, full.xfer_s), (runs, head, tail)


class _LoopCount:
    """Counts the layers the plain loop runs for ``timeline_totals`` (the fast path skips most
    of a run's), not for the item-by-item reference (``_same`` switches it on around the former)."""

    def __init__(self, monkeypatch):
        self.layers = 0
        self.on = False
        loop = afd._loop

        def counted(state, items, layers):
            self.layers += layers if self.on else 0
            return loop(state, items, layers)
        monkeypatch.setattr(afd, "_loop", counted)


def _f_bound_run(rng: random.Random, lanes: int, grid: float | None) -> tuple:
    """A run whose F time per lane is about the rest of the lane's round trip (either side)."""
    def x(lo, hi):
        v = rng.uniform(lo, hi)
        return round(v / grid) * grid if grid else v
    a = [x(1e-5, 6e-5) for _ in range(lanes)]
    s = [x(1e-6, 2e-5)] * lanes if rng.random() < 0.5 else [x(1e-6, 2e-5) for _ in range(lanes)]
    r = s if rng.random() < 0.7 else [x(1e-6, 2e-5) for _ in range(lanes)]
    # F per lane around (a + s + r) / (lanes - 1): sometimes F-bound by a wide margin, sometimes by
    # none (ties) or not at all
    f0 = (max(a) + max(s) + max(r)) / (lanes - 1) * rng.choice([0.9, 0.99, 1.0, 1.0, 1.01, 1.5, 4.0])
    f = [f0] * lanes if rng.random() < 0.6 else [x(0.95 * f0, 1.05 * f0) for _ in range(lanes)]
    return (rng.randint(1, 100), a, s, f, r)


def test_timeline_fast_path_equals_the_loop_on_random_f_bound_inputs(monkeypatch):
    count = _LoopCount(monkeypatch)
    rng = random.Random(3)
    fast_runs = 0
    for case in range(1500):
        lanes = rng.randint(2, 5)
        grid = rng.choice([None, None, 2.0 ** -20, 2.0 ** -24, 1e-6])
        runs = [_f_bound_run(rng, lanes, grid) for _ in range(rng.randint(1, 2))]
        head = rng.choice([0.0, 1e-6, rng.uniform(0, 1e-4), 1e3 + rng.random()])
        tail = rng.uniform(0, 1e-4)
        before = count.layers
        _same(runs, head, tail, count)
        fast_runs += count.layers - before < sum(run[0] for run in runs)
    assert fast_runs > 500          # the fast path was taken, not just the loop


def test_timeline_fast_path_equals_the_loop_on_captured_like_steps(monkeypatch):
    """Shapes as the AFD step pricer sends them (one MoE run of 94 layers, equal F, s = r)."""
    count = _LoopCount(monkeypatch)
    rng = random.Random(9)
    for _ in range(300):
        lanes = rng.choice([2, 2, 3, 4])
        a = [rng.uniform(4e-5, 5e-5) for _ in range(lanes)]
        s = [rng.choice([1.35e-5, rng.uniform(1e-5, 2e-5)])] * lanes
        f = [rng.choice([2.08e-4, 5.8e-5, rng.uniform(5e-5, 3e-4)])] * lanes
        _same([(94, a, s, f, s)], rng.uniform(1e-6, 1e-5), rng.uniform(1e-4, 3e-4), count)
    assert count.layers < 300 * 94 // 2


def test_one_lane_chain_equals_the_loop(monkeypatch):
    count = _LoopCount(monkeypatch)
    rng = random.Random(4)
    for _ in range(400):
        grid = rng.choice([None, 2.0 ** -22, 1e-6])
        runs = [(rng.randint(1, 100), *([rng.choice([0.0, rng.uniform(1e-6, 3e-4)])] for _ in range(4)))
                for _ in range(rng.randint(1, 2))]
        if grid:
            runs = [(n, *([round(x[0] / grid) * grid] for x in rows)) for n, *rows in runs]
        _same(runs, rng.choice([0.0, rng.uniform(0, 1e-4), 7.0]), rng.uniform(0, 1e-4), count)
    assert count.layers < 400 * 50 // 3       # mostly the chain, not the loop


def test_timeline_fast_path_on_degenerate_inputs():
    zero, one = [0.0, 0.0], [1.0, 1.0]
    for runs in ([(50, zero, zero, zero, zero)], [(50, one, one, one, one)], [(50, zero, zero, one, zero)],
                 [(50, [1.0, 2.0], zero, [3.0, 3.0], zero)], [(7, one, zero, [5.0, 5.0], one)] * 3,
                 [(50, [1e-300, 1e-300], [5e-324, 0.0], [1e-299, 1e-299], [0.0, 5e-324])],
                 [(50, one, one, [float("inf")] * 2, one)], [(50, one, one, [float("nan"), 9.0], one)],
                 [(50, [0.0], [0.0], [0.0], [0.0])], [(50, [-0.0], [0.0], [-0.0], [0.0])],
                 [(9, [1.0], [0.0], [2.0], [-0.0])],
                 [(50, [1.0], [1.0], [float("nan")], [1.0])], [(50, [1.0], [1.0], [float("inf")], [1.0])]):
        for head in (0.0, 1.0, 2.0 ** 52):
            full, fast = _plain(runs, head, 0.5), timeline_totals(runs, head, 0.5)
            assert repr((fast.end_s, fast.a_busy_s, fast.f_busy_s, fast.xfer_s)) == \
                repr((full.end_s, full.a_busy_s, full.f_busy_s, full.xfer_s)), runs


# ------------------------------------------------------------------ decode attention
def _plain_attention(e: BatchEngine, batch: BatchShape, timing: str) -> float:
    ops = e.attention_ops(batch)
    assert len(ops) == 1
    op, n_layers = ops[0]
    return e.cost_model.op_times_s([op], timing)[0] * n_layers


def test_decode_attention_from_count_and_sum_equals_the_built_op():
    rng = random.Random(1)
    for model in (LLAMA_8B, MOE, MLA):
        e = engine(model)
        assert e._decode_attn is not None
        for _ in range(400):
            n = rng.randint(1, 300)
            ctx = tuple(rng.choice([0, rng.randint(0, 300), rng.randint(0, 130_000)]) for _ in range(n))
            batch = BatchShape((1,) * n, ctx)
            for timing in ("kernel", "launch"):
                assert e.attention_time_s(batch.new_tokens, ctx, timing) == _plain_attention(e, batch, timing)
                assert e._attention_time_s(batch, timing) == _plain_attention(e, batch, timing)


def test_decode_work_equals_flops_and_bytes_of_the_op():
    rng = random.Random(2)
    for _ in range(500):
        mla = rng.random() < 0.3
        kw = dict(is_mla=True, kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=rng.choice([0, 128])) \
            if mla else {}
        ctx = tuple(rng.randint(0, 200_000) for _ in range(rng.randint(0, 50)))
        op = AttentionOp((), (), ctx, rng.randint(1, 128), rng.randint(1, 16), rng.choice([64, 128, 576]),
                         rng.choice([1.0, 2.0]), rng.choice([1.0, 2.0]), **kw)
        template = AttentionOp((), (), (), op.num_heads, op.num_kv_heads, op.head_dim, op.kv_bytes_per_elem,
                               op.act_bytes, **kw)
        assert template.decode_work(len(ctx), sum(ctx)) == (op.flops, op.bytes_moved)


def test_decode_attention_fast_path_only_where_it_is_exact():
    class Other(RooflineCostModel):     # any other cost model prices the built op
        pass
    sliding = LLAMA_8B.__class__(**{**LLAMA_8B.__dict__, "sliding_window": 128, "num_sliding_layers": 16})
    e = BatchEngine(LLAMA_8B, engine().parallel, H100, Other(H100), engine().cudagraph)
    assert e._decode_attn is None and engine(sliding)._decode_attn is None
    batch = BatchShape((1, 1, 1), (5, 500, 5000))
    assert e.step_cost(batch) == engine().step_cost(batch)
    mixed = BatchShape((1, 7, 1), (5, 500, 5000))          # prefill rows: the op path
    assert engine().attention_time_s(mixed.new_tokens, mixed.context_lens, "launch") == \
        _plain_attention(engine(), mixed, "launch")


# ------------------------------------------------------------------ the AFD step memo
def test_afd_uniform_decode_steps_are_not_memoized():
    from test_afd import _engine
    e, fresh = _engine("H100"), _engine("H100")
    steps = [BatchShape((1,) * 5, (10, 20, 30, 40, 50)), BatchShape((1,) * 5, (10, 20, 30, 40, 50)),
             BatchShape((1,) * 5, (11, 21, 31, 41, 51)), BatchShape((1, 9, 1), (3, 0, 7)),
             BatchShape((1, 9, 1), (3, 0, 7)), BatchShape((1,) * 5, (10, 20, 30, 40, 50))]
    for b in steps:
        assert e.step_cost(b) == fresh._price(b)[0]
    assert [s.a_busy_s for s in e.stats] == [fresh._price(b)[1].a_busy_s for b in steps]
    assert list(e._cache) == [steps[3]]          # only the non-uniform shape is memoized


def test_afd_decode_plans_and_decode_attention_equal_the_general_path():
    """Decode steps priced from the plan memo (by request count) and the decode attention equal
    the general path (plan built per step, attention from the built op)."""
    from test_afd import _engine
    rng = random.Random(6)
    for lanes in (1, 2, 3):
        fast, plain = _engine("H100", lanes=lanes), _engine("H100", lanes=lanes)
        plain.attn._decode_attn = None
        for _ in range(300):
            n = rng.randint(1, 40)
            new = (1,) * n if rng.random() < 0.8 else tuple(rng.choice([1, 1, 5, 300]) for _ in range(n))
            batch = BatchShape(new, tuple(rng.randint(0, 20_000) for _ in range(n)))
            plain._decode_plans.clear()
            got, want = fast._price(batch), plain._price(batch)
            assert got == want, batch
