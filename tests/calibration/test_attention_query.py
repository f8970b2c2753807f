"""The per-step attention query: scalar features equal to calibration.features, the memo cells
on the length statistics (exact hits and misses, the cell's out-of-range flag) and, at a fine
grid, the unquantized sklearn prediction."""

import math

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import AttentionPredictor
from calibration.predictors import attention_query as AQ
from frontier.ops import AttentionOp

KW = dict(num_heads=32, num_kv_heads=8, head_dim=128)


def _rows() -> pd.DataFrame:
    """Uniform decode and prefill batches (AIC-like), latency from a smooth synthetic law."""
    base = dict(num_heads=32, num_kv_heads=8, head_dim=128, window_size=0, kv_dtype="bf16", is_mla=False,
                prefill_ctx_max=0, timing_mode="kernel")
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128):
        for ctx in (128, 256, 512, 1024, 2048, 4096):
            lat = 6e-6 + b * ctx * 2 * 8 * 128 * 2 / 2.5e12 * (1.0 + 0.2 * math.sin(b + ctx / 700))
            rows.append({**base, "op_name": "generation", "batch_size": b, "num_prefill": 0, "num_decode": b,
                         "prefill_tokens": 0, **{f"prefill_len_{s}": 0 for s in ("min", "max", "mean", "p50", "p90")},
                         **{f"decode_ctx_{s}": ctx for s in ("min", "max", "mean", "p50", "p90")},
                         "latency_s_median": lat})
    for b in (1, 2, 4):
        for n in (64, 128, 256, 512, 1024, 2048):
            lat = 8e-6 + b * n * n * 4 * 32 * 128 / 2 / 6e14 * (1.0 + 0.1 * math.cos(n / 300))
            rows.append({**base, "op_name": "context", "batch_size": b, "num_prefill": b, "num_decode": 0,
                         "prefill_tokens": b * n, **{f"prefill_len_{s}": n for s in ("min", "max", "mean", "p50", "p90")},
                         **{f"decode_ctx_{s}": 0 for s in ("min", "max", "mean", "p50", "p90")},
                         "latency_s_median": lat})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def pred():
    return AttentionPredictor(n_estimators=6).fit(_rows())


OPS = [AttentionOp((), (), (1023,) * 8, **KW),
       AttentionOp((), (), (100, 700, 2500, 2501, 3000), **KW),
       AttentionOp((300, 17), (0, 40), (), **KW),
       AttentionOp((512,), (128,), (90, 4000, 511), **KW),                      # mixed
       AttentionOp((), (), (5, 6), 16, 1, 576, 1.0, 2, True, 512, 64, 512),    # MLA, fp8 KV
       AttentionOp((2048,), (0,), (), 64, 8, 64),
       AttentionOp((), (), (100, 200), 8, 1, 512)]                                # wide heads


def _assert_rows_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        if isinstance(v, str):
            assert got[k] == v, k
        else:
            assert float(got[k]) == pytest.approx(float(v), rel=1e-12), k


def test_scalar_rows_equal_numpy_features():
    for op in OPS:
        row = AQ.canon_row(op)
        _assert_rows_equal(row, F.canon_row_from_op(op)[1])
        table = F.canon_from_records([row], "attention")
        assert AQ.feature_row(row) == pytest.approx(F.featurize(table, "attention")[0].tolist(), rel=1e-12, abs=1e-12)
        assert AQ.reference_row(row) == pytest.approx(F.reference_s(table, "attention")[0], rel=1e-12)
        pre, dec = F.split_mixed(table)
        got = AQ.split_mixed_row(row)
        _assert_rows_equal(got[0], {k: v[0] for k, v in pre.items()})
        _assert_rows_equal(got[1], {k: v[0] for k, v in dec.items()})
    # sliding window clips the decode context and the prefill pairs in both versions
    row = {**AQ.canon_row(OPS[3]), "window_size": 256.0}
    table = F.canon_from_records([row], "attention")
    assert AQ.feature_row(row) == pytest.approx(F.featurize(table, "attention")[0].tolist(), rel=1e-12, abs=1e-12)
    assert AQ.reference_row(row) == pytest.approx(F.reference_s(table, "attention")[0], rel=1e-12)


def test_cells_at_a_fine_grid_are_the_canonical_rows(monkeypatch):
    """cell_parts + cell_row give back query_rows' canonical rows when the grid is ~exact
    (2^30 cells per log2 unit), with the same head shape and the exact reference time."""
    monkeypatch.setattr(AQ, "QUERY_CELLS", 2.0 ** 30)
    ops = OPS + [AttentionOp((), (), (0,), **KW), AttentionOp((), (), tuple(range(0, 9000, 7)), **KW),
                 AttentionOp((1, 4000, 33), (0, 0, 5000), (7,) * 40, **KW)]
    for op in ops:
        for has_mixed in (False, True):
            rows = AQ.query_rows(op, has_mixed)
            parts = AQ.cell_parts(op, has_mixed)
            assert len(parts) == len(rows) == (2 if op.prefill_new and op.decode_ctx and not has_mixed else 1)
            for (shape, cell, ref), row in zip(parts, rows):
                assert shape == tuple(row[c] for c in AQ.KEY_COLUMNS) and cell[0] == row["op_name"]
                got = AQ.cell_row(shape, cell)
                assert got.keys() == row.keys()
                for k, v in row.items():
                    assert got[k] == v if isinstance(v, str) else float(got[k]) == pytest.approx(float(v), rel=1e-7), k
                assert ref == pytest.approx(AQ.reference_row(row), rel=1e-12)


def test_a_cell_is_a_grid_index_per_statistic():
    op = AttentionOp((300, 17), (0, 40), (1023, 99), **KW)
    pre, dec = AQ.cell_parts(op, False)
    q = lambda x, cells=16: round(math.log2(1 + x) * cells)     # noqa: E731
    pairs = 300 * 0 + 300 * 301 / 2 + 17 * 40 + 17 * 18 / 2
    assert pre[1] == ("context", (q(2), q(17), q(300), q(158.5), q(158.5), q(271.7), q(40), q(pairs)), ())
    # decode: the count at 1/16 in log2, min, max, p50 and p90 at 1/4, the mean at 1/32
    assert AQ._decode_cells() == (16.0, 4.0, 4.0, 32.0, 4.0, 4.0)
    assert dec[1] == ("generation", (), (q(2), q(100, 4), q(1024, 4), q(562, 32), q(562, 4), q(931.6, 4)))
    row = AQ.cell_row(dec[0], dec[1])
    # the representative row: integer statistics at the nearest integer to the cell's centre,
    # the others at the centre
    assert (row["num_decode"], row["decode_ctx_min"], row["decode_ctx_max"]) == (2.0, 107.0, 1023.0)
    assert row["decode_ctx_mean"] == pytest.approx(2 ** (q(562, 32) / 32) - 1, rel=1e-15)
    assert row["decode_ctx_p90"] == pytest.approx(2 ** (q(931.6, 4) / 4) - 1, rel=1e-15)
    prow = AQ.cell_row(pre[0], pre[1])
    # prefill statistics at 1/16: integers exact below ~23, 300 -> its cell's nearest integer
    assert (prow["num_prefill"], prow["prefill_len_min"], prow["prefill_len_max"]) == (2.0, 17.0, 303.0)
    assert prow["prefill_len_mean"] == pytest.approx(2 ** (q(158.5) / 16) - 1, rel=1e-15)


def test_submodel_key_is_the_predictors(pred):
    assert [pred._row_key(AQ, AQ.canon_row(op)) for op in OPS] == \
        pred.submodel_keys(F.canon_from_ops(OPS, "attention")).tolist()


def _at_cell(pred, op, mode="kernel"):
    """sklearn at each part's cell row x the part's exact reference time, summed (seconds)."""
    model = pred.models[(mode, "mha:bf16")]
    return sum(math.exp(model.predict(np.asarray([AQ.feature_row(AQ.cell_row(shape, cell))]))[0]) * ref
               for shape, cell, ref in AQ.cell_parts(op, False))


def test_memo_hits_inside_a_grid_cell(pred):
    pred.reset_cache()
    a = AttentionOp((), (), (1999,) * 16, **KW)        # schema context 2000
    b = AttentionOp((), (), (1989,) * 16, **KW)        # 1990: the same cell on every statistic
    c = AttentionOp((), (), (2999,) * 16, **KW)        # another cell
    cells = [AQ.cell_parts(op, False)[0][1] for op in (a, b, c)]
    assert cells[0] == cells[1] != cells[2]
    pa, pb, pc = (pred.predict_s([op])[0] for op in (a, b, c))
    assert (pred.memo_lookups, pred.memo_misses) == (3, 2)
    # a hit reuses the model output: prices differ only by the exact reference time (ratio target)
    ra, rb = (AQ.reference_row(AQ.canon_row(op)) for op in (a, b))
    assert pb / pa == pytest.approx(rb / ra, rel=1e-12)
    # the model is evaluated on the cell's representative row
    assert pa == pytest.approx(_at_cell(pred, a), rel=1e-12)
    # launch mode without launch rows: kernel + kernels_per_op x overhead, from the same memo cell
    assert pred.predict_s([a], "launch")[0] == pytest.approx(pa + 2 * pred.launch_overhead_s, rel=1e-12)
    assert pc != pa


def test_out_of_range_flag_is_the_cells(pred):
    pred.reset_cache()
    inside = AttentionOp((), (), (1999,) * 16, **KW)   # schema context 2000: inside the measured 128-4096
    past = AttentionOp((), (), (8999,) * 16, **KW)     # 9000: past the largest measured context
    edge = AttentionOp((), (), (4095,) * 16, **KW)     # 4096, the largest measured, and 4097 share a cell
    beyond = AttentionOp((), (), (4096,) * 16, **KW)   # whose representative row is in range
    p, oor = pred.predict_s([inside, past, edge, beyond], return_mask=True)
    assert oor.tolist() == [False, True, False, False]
    assert pred.memo_misses == 3                        # edge and beyond: one cell, one model evaluation
    # an unknown sub-model (MLA rows were never measured) prices as NaN, flagged
    mla = AttentionOp((), (), (5, 6), 16, 1, 576, 1.0, 2, True, 512, 64, 512)
    p, oor = pred.predict_s([mla], return_mask=True)
    assert math.isnan(p[0]) and oor[0]


def test_query_is_sklearn_on_the_cell_rows(pred):
    pred.reset_cache()
    rng = np.random.default_rng(0)
    ops = [AttentionOp((), (), tuple(int(c) for c in rng.integers(100, 4000, size=int(n))), **KW)
           for n in rng.integers(1, 100, size=30)]
    ops += [AttentionOp((int(n),), (0,), (), **KW) for n in rng.integers(64, 2048, size=15)]
    ops += [AttentionOp((int(n),), (0,), tuple(int(c) for c in rng.integers(100, 4000, size=8)), **KW)
            for n in rng.integers(64, 2048, size=15)]
    got = pred.predict_s(ops)
    assert np.abs(got / np.asarray([_at_cell(pred, op) for op in ops]) - 1.0).max() <= 1e-12
    assert pred.memo_lookups == 30 + 15 + 2 * 15      # a mixed batch looks up its two parts


def test_stale_scalar_features_fall_back_to_numpy(monkeypatch):
    pred = AttentionPredictor(n_estimators=2).fit(_rows())
    ops = OPS[:4]
    want = pred.predict_s(ops)
    fresh = AttentionPredictor(n_estimators=2).fit(_rows())
    monkeypatch.setattr(AQ, "feature_row", lambda row: [0.0] * len(F.FEATURE_NAMES["attention"]))
    with pytest.warns(UserWarning, match="attention_query features differ"):
        got = fresh.predict_s(ops)
    assert np.array_equal(got, want) and fresh._scalar_ok is False


def test_fine_grid_query_equals_unquantized_sklearn(pred, monkeypatch):
    # at a ~exact grid the op query prices as sklearn on the op's own canonical rows (mixed
    # batches split into prefill + decode parts, launch mode included), with the same flags.
    # No mean length at a multiple of 128 here: the representative row is exact only to ~1e-9,
    # which moves a ceil(mean / 128) feature sitting exactly on its step
    monkeypatch.setattr(AQ, "QUERY_CELLS", 2.0 ** 30)
    ops = OPS[:3] + [AttentionOp((500,), (128,), (90, 4000, 511), **KW)]
    ops += [AttentionOp((), (), (c,) * 16, **KW) for c in (99, 1999, 4096, 9000)]
    for mode in ("kernel", "launch"):
        pred.reset_cache()
        got, got_oor = pred.predict_s(ops, mode, return_mask=True)
        model = pred.models[("kernel", "mha:bf16")]
        lo, hi = pred.ranges[("kernel", "mha:bf16")]
        shift = 2 * pred.launch_overhead_s if mode == "launch" else 0.0
        for op, p, oor in zip(ops, got, got_oor):
            rows = AQ.query_rows(op, False)
            X = np.asarray([AQ.feature_row(r) for r in rows])
            want = sum(math.exp(y) * AQ.reference_row(r) + shift for y, r in zip(model.predict(X), rows))
            assert p == pytest.approx(want, rel=1e-9)
            assert oor == bool(((X < lo - 1e-6) | (X > hi + 1e-6)).any())


def test_a_predictor_with_mixed_rows_prices_a_mixed_batch_as_one_cell():
    """Profiled "mixed" rows: a chunked-prefill batch is one row, one cell, one memo lookup."""
    rows = _rows()
    mixed = [{**rows.iloc[0].to_dict(), "op_name": "mixed", "batch_size": 1 + b, "num_prefill": 1, "num_decode": b,
              "prefill_tokens": n, **{f"prefill_len_{s}": n for s in ("min", "max", "mean", "p50", "p90")},
              **{f"decode_ctx_{s}": 1024 for s in ("min", "max", "mean", "p50", "p90")},
              "latency_s_median": 1e-5 + n * n * 4 * 32 * 128 / 2 / 6e14 + b * 1024 * 4096 / 2.5e12}
             for n in (128, 512, 2048) for b in (4, 16, 64)]
    pred = AttentionPredictor(n_estimators=4).fit(pd.concat([rows, pd.DataFrame(mixed)], ignore_index=True))
    assert pred.has_mixed
    op = AttentionOp((500,), (0,), (1023,) * 16, **KW)
    got = pred.predict_s([op])[0]
    assert (pred.memo_lookups, pred.memo_misses) == (1, 1)
    (shape, cell, ref), = AQ.cell_parts(op, True)
    assert cell[0] == "mixed"
    x = AQ.feature_row(AQ.cell_row(shape, cell))
    assert got == pytest.approx(math.exp(pred.models[("kernel", "mha:bf16")].predict(np.asarray([x]))[0]) * ref,
                                rel=1e-12)


def _general_parts(op: AttentionOp, has_mixed: bool) -> list[tuple[tuple, tuple, float]]:
    """cell_parts written once for every batch (the form before its decode-only and one-prefill
    shortcuts): the shortcuts must give these cells and reference times exactly."""
    shape = (op.num_heads, op.num_kv_heads, op.head_dim, 0.0, F._kv_dtype(op.kv_bytes_per_elem), op.is_mla)
    heads, kvh, hd, kvb = (float(op.num_heads), float(op.num_kv_heads), float(op.head_dim),
                           F._DTYPE_BYTES.get(shape[4], 2.0))
    q, c = (lambda x, cells: round(math.log2(1.0 + x) * cells)), AQ.QUERY_CELLS     # noqa: E731
    pre = dec = ()
    if op.prefill_new:
        s = sorted(op.prefill_new)
        npre, ptok = float(len(s)), float(sum(s))
        pmean = ptok / npre
        pairs = float(sum(k * x + k * (k + 1) / 2 for k, x in zip(op.prefill_new, op.prefill_ctx)))
        pre = tuple(q(x, c) for x in (npre, s[0], s[-1], pmean, AQ._quantile(s, 0.5), AQ._quantile(s, 0.9),
                                      max(op.prefill_ctx), pairs))
    if op.decode_ctx:
        s = sorted(op.decode_ctx)
        nd = float(len(s))
        dmean = sum(s) / nd + 1.0
        dec = tuple(q(x, k) for x, k in zip((nd, s[0] + 1, s[-1] + 1, dmean, AQ._quantile(s, 0.5) + 1.0,
                                             AQ._quantile(s, 0.9) + 1.0), AQ._decode_cells()))
    ref = AQ._reference_s
    if pre and dec and has_mixed:
        return [(shape, ("mixed", pre, dec), ref(heads, kvh, hd, 0.0, kvb, nd, dmean, npre, pmean, pairs, ptok))]
    parts = []
    if pre:
        parts.append((shape, ("context", pre, ()), ref(heads, kvh, hd, 0.0, kvb, 0.0, 0.0, npre, pmean, pairs, ptok)))
    if dec:
        parts.append((shape, ("generation", (), dec), ref(heads, kvh, hd, 0.0, kvb, nd, dmean, 0.0, 0.0, 0.0, 0.0)))
    return parts


def test_decode_only_and_one_prefill_shortcuts_are_exact():
    """Decode-only batches (odd and even counts: the median is the middle or the midpoint of the
    two middles) and one-prefill batches take shortcuts; cells and reference times are exactly
    those of the general form, for both predictor kinds (mixed rows or not)."""
    rng = np.random.default_rng(3)
    heads = [KW, dict(num_heads=64, num_kv_heads=8, head_dim=64, kv_bytes_per_elem=1.0),
             dict(num_heads=16, num_kv_heads=1, head_dim=576, kv_bytes_per_elem=1.0, is_mla=True, kv_lora_rank=512,
                  qk_rope_head_dim=64, v_head_dim=512)]
    ops = []
    for i in range(600):
        nd, npre = int(rng.choice([0, 1, 2, 3, 4, 7, 64, 301])), int(rng.choice([0, 0, 1, 1, 2, 5]))
        npre = npre or (0 if nd else 1)
        top = int(rng.choice([10, 5000, 200_000]))
        ops.append(AttentionOp(tuple(int(x) for x in rng.integers(1, 9000, npre)),
                               tuple(int(x) for x in rng.integers(0, 9000, npre)),
                               tuple(int(x) for x in rng.integers(0, top, nd)), **heads[i % 3]))
    assert {len(op.decode_ctx) % 2 for op in ops if op.decode_ctx} == {0, 1}
    assert sum(len(op.prefill_new) == 1 for op in ops) > 100
    for op in ops:
        for has_mixed in (False, True):
            assert AQ.cell_parts(op, has_mixed) == _general_parts(op, has_mixed)


def test_memo_cells_are_forgotten_together_at_the_cap(pred, monkeypatch):
    """MAX_MEMO_CELLS bounds the cells of every (sub-model, shape) together: the cap clears them
    all, the next query of a forgotten cell evaluates it again, and prices do not change."""
    from calibration.predictors import base
    ops = [AttentionOp((), (), (c,) * 16, **KW) for c in (199, 999, 2999)]
    pred.reset_cache()
    want = pred.predict_s(ops)
    monkeypatch.setattr(base, "MAX_MEMO_CELLS", 2)
    pred.reset_cache()
    got = pred.predict_s(ops)                    # the third cell clears the first two
    assert pred.memo_misses == 3 and pred._num_cells == 1
    assert pred.predict_s(ops[2:])[0] == got[2] and pred.memo_misses == 3     # kept
    assert pred.predict_s(ops[:1])[0] == got[0] and pred.memo_misses == 4     # forgotten: evaluated again
    assert np.array_equal(got, want)
