"""The per-step attention query: scalar features equal to calibration.features, the grid memo
(exact hits and misses, out-of-range flag on unquantized features) and its error bound against
the unquantized sklearn prediction."""

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


def test_fast_rows_equal_the_canonical_rows():
    ops = OPS + [AttentionOp((), (), (0,), **KW), AttentionOp((), (), tuple(range(0, 9000, 7)), **KW),
                 AttentionOp((1, 4000, 33), (0, 0, 5000), (7,) * 40, **KW)]
    for op in ops:
        for has_mixed in (False, True):
            rows = AQ.query_rows(op, has_mixed)
            parts = AQ.fast_rows(op, has_mixed)
            if has_mixed and op.prefill_new and op.decode_ctx:
                assert parts is None and len(rows) == 1
                continue
            assert len(parts) == len(rows) == (2 if op.prefill_new and op.decode_ctx else 1)
            for (shape, x, ref), row in zip(parts, rows):
                assert shape == tuple(row[c] for c in AQ.KEY_COLUMNS)
                assert x == pytest.approx(AQ.feature_row(row), rel=1e-12, abs=1e-12)
                assert ref == pytest.approx(AQ.reference_row(row), rel=1e-12)


def test_a_stale_fast_rows_falls_back_to_the_canonical_path(monkeypatch):
    pred = AttentionPredictor(n_estimators=2).fit(_rows())
    want = pred.predict_s(OPS[:4])
    fresh = AttentionPredictor(n_estimators=2).fit(_rows())
    real = AQ.fast_rows
    monkeypatch.setattr(AQ, "fast_rows", lambda op, m: [(s, x, 1.0) for s, x, _ in real(op, m)])
    with pytest.warns(UserWarning, match="fast_rows differs"):
        got = fresh.predict_s(OPS[:4])
    assert np.array_equal(got, want) and fresh._fast_ok is False


def test_submodel_key_is_the_predictors(pred):
    assert [pred._row_key(AQ, AQ.canon_row(op)) for op in OPS] == \
        pred.submodel_keys(F.canon_from_ops(OPS, "attention")).tolist()


def test_memo_hits_inside_a_grid_cell(pred):
    pred.reset_cache()
    a = AttentionOp((), (), (1999,) * 16, **KW)        # schema context 2000
    b = AttentionOp((), (), (1929,) * 16, **KW)        # 1930: same 1/16-log2 cell on every feature
    c = AttentionOp((), (), (2999,) * 16, **KW)        # another cell
    cells = [tuple(round(v * g) for v, g in zip(AQ.feature_row(AQ.canon_row(op)), AQ.QUERY_GRID)) for op in (a, b, c)]
    assert cells[0] == cells[1] != cells[2]
    pa, pb, pc = (pred.predict_s([op])[0] for op in (a, b, c))
    assert (pred.memo_lookups, pred.memo_misses) == (3, 2)
    # a hit reuses the model output: prices differ only by the exact reference time (ratio target)
    ra, rb = (AQ.reference_row(AQ.canon_row(op)) for op in (a, b))
    assert pb / pa == pytest.approx(rb / ra, rel=1e-12)
    # the model is evaluated at the grid point of the cell
    x = np.asarray(AQ.feature_row(AQ.canon_row(a)))
    grid = np.asarray(AQ.QUERY_GRID)
    point = np.round(x * grid) / grid
    model = pred.models[("kernel", "mha:bf16")]
    assert pa == pytest.approx(math.exp(model.predict(point[None])[0]) * ra, rel=1e-12)
    # launch mode without launch rows: kernel + kernels_per_op x overhead, from the same memo cell
    assert pred.predict_s([a], "launch")[0] == pytest.approx(pa + 2 * pred.launch_overhead_s, rel=1e-12)
    assert pc != pa


def test_out_of_range_uses_unquantized_features(pred):
    pred.reset_cache()
    edge = AttentionOp((), (), (4095,) * 16, **KW)     # schema context 4096: the largest measured
    past = AttentionOp((), (), (4096,) * 16, **KW)     # 4097: same grid cell, but past the range
    p, oor = pred.predict_s([edge, past], return_mask=True)
    assert oor.tolist() == [False, True]
    assert pred.memo_misses == 1                        # one cell, one model evaluation
    # an unknown sub-model (MLA rows were never measured) prices as NaN, flagged
    mla = AttentionOp((), (), (5, 6), 16, 1, 576, 1.0, 2, True, 512, 64, 512)
    p, oor = pred.predict_s([mla], return_mask=True)
    assert math.isnan(p[0]) and oor[0]


def test_fast_path_is_sklearn_at_the_grid_point(pred):
    pred.reset_cache()
    rng = np.random.default_rng(0)
    ops = [AttentionOp((), (), tuple(int(c) for c in rng.integers(100, 4000, size=int(n))), **KW)
           for n in rng.integers(1, 100, size=30)]
    ops += [AttentionOp((int(n),), (0,), (), **KW) for n in rng.integers(64, 2048, size=15)]
    ops += [AttentionOp((int(n),), (0,), tuple(int(c) for c in rng.integers(100, 4000, size=8)), **KW)
            for n in rng.integers(64, 2048, size=15)]
    fast = pred.predict_s(ops)
    model = pred.models[("kernel", "mha:bf16")]
    grid = np.asarray(AQ.QUERY_GRID)
    want = []
    for op in ops:     # numpy features of each part (mixed: prefill + decode), sklearn at the grid point
        table = F.canon_from_ops([op], "attention")
        parts = F.split_mixed(table) if op.prefill_new and op.decode_ctx else (table,)
        want.append(sum(math.exp(model.predict(np.round(F.featurize(t, "attention") * grid) / grid)[0])
                        * F.reference_s(t, "attention")[0] for t in parts))
    assert np.abs(fast / np.asarray(want) - 1.0).max() <= 1e-12
    assert pred.memo_lookups == 30 + 15 + 2 * 15      # a mixed batch looks up its two parts
    assert pred._fast_ok is True                       # the ops took fast_rows


def test_stale_scalar_features_fall_back_to_numpy(monkeypatch):
    pred = AttentionPredictor(n_estimators=2).fit(_rows())
    ops = OPS[:4]
    want = pred.predict_s(ops)
    fresh = AttentionPredictor(n_estimators=2).fit(_rows())
    monkeypatch.setattr(AQ, "feature_row", lambda row: [0.0] * len(F.FEATURE_NAMES["attention"]))
    with pytest.warns(UserWarning, match="attention_query features differ"):
        got = fresh.predict_s(ops)
    assert np.array_equal(got, want) and fresh._scalar_ok is False


def test_scalar_path_equals_predict_canon_on_the_same_grid(pred, monkeypatch):
    # with the table grid (1/64), op queries and canonical tables must price identically,
    # mixed batches (split into prefill + decode parts) and launch mode included
    from calibration.predictors.base import GRID
    monkeypatch.setattr(AQ, "QUERY_GRID", (GRID,) * len(F.FEATURE_NAMES["attention"]))
    ops = OPS[:4] + [AttentionOp((), (), (c,) * 16, **KW) for c in (99, 1999, 4096)]
    for mode in ("kernel", "launch"):
        pred.reset_cache()
        fast, fast_oor = pred.predict_s(ops, mode, return_mask=True)
        table, table_oor = pred.predict_canon(F.canon_from_ops(ops, "attention"), mode)
        assert np.abs(fast / table - 1).max() <= 1e-12
        assert fast_oor.tolist() == table_oor.tolist()
