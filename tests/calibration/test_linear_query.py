"""The per-op GEMM query: scalar features equal to calibration.features, and predict_s equal to
sklearn at the 1/64 grid point of the unquantized features."""

import math

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import LinearPredictor
from calibration.predictors import linear_query as LQ
from frontier.ops import GemmOp

OPS = [GemmOp("qkv", 1, 6144, 4096), GemmOp("o", 37, 4096, 4096), GemmOp("up", 300, 28672, 4096),
       GemmOp("down", 8192, 4096, 14336), GemmOp("odd", 129, 1000, 1000),
       GemmOp("fp8", 64, 4096, 4096, weight_bytes_per_param=1.0, compute_dtype="fp8"),
       GemmOp("blk", 640, 7168, 2048, weight_bytes_per_param=1.000244, compute_dtype="fp8")]


def _rows() -> pd.DataFrame:
    rows = []
    for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for n, k in ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336)):
            lat = 4e-6 + 2 * m * n * k / 7e14 + n * k * 2 / 3e12 * (1.0 + 0.1 * math.sin(m / 50))
            rows.append({"m": m, "n": n, "k": k, "dtype": "bf16", "timing_mode": "kernel", "latency_s_median": lat})
    return pd.DataFrame(rows)


def test_scalar_rows_equal_numpy_features():
    for op in OPS:
        (row,) = LQ.query_rows(op)
        assert row == F.canon_row_from_op(op)[1]
        table = F.canon_from_records([row], "linear")
        assert LQ.feature_row(row) == pytest.approx(F.featurize(table, "linear")[0].tolist(), rel=1e-12, abs=1e-12)
        assert LQ.reference_row(row) == pytest.approx(F.reference_s(table, "linear")[0], rel=1e-12)


def test_predict_s_is_sklearn_at_the_grid_point():
    pred = LinearPredictor(n_estimators=4).fit(_rows())
    ops = [GemmOp("x", m, n, k) for m in (3, 100, 101, 1500, 9000) for n, k in ((4096, 4096), (28672, 4096))]
    got, oor = pred.predict_s(ops, return_mask=True)
    grid = np.asarray(LQ.QUERY_GRID)
    X = F.featurize(F.canon_from_ops(ops, "linear"), "linear")
    want = np.exp(pred.models[("kernel", "bf16")].predict(np.round(X * grid) / grid))
    assert np.abs(got / want - 1).max() <= 1e-12
    assert oor.tolist() == [False] * 8 + [True] * 2          # m = 9000 > the largest measured 8192
    assert (pred.memo_lookups, pred.memo_misses) == (10, 10)
    again = pred.predict_s(ops[:2])                           # the same cells: no model walk
    assert np.array_equal(again, got[:2]) and pred.memo_misses == 10
    # an unknown dtype prices as NaN, flagged
    p, m = pred.predict_s([OPS[5]], return_mask=True)
    assert math.isnan(p[0]) and m[0]


def test_scalar_path_equals_predict_canon_on_the_same_grid(monkeypatch):
    from calibration.predictors.base import GRID
    pred = LinearPredictor(n_estimators=4).fit(_rows())
    monkeypatch.setattr(LQ, "QUERY_GRID", (GRID,) * len(F.FEATURE_NAMES["linear"]))
    ops = OPS[:5] + [GemmOp("x", m, 4096, 4096) for m in (3, 777, 9000)]
    for mode in ("kernel", "launch"):
        pred.reset_cache()
        fast, fast_oor = pred.predict_s(ops, mode, return_mask=True)
        table, table_oor = pred.predict_canon(F.canon_from_ops(ops, "linear"), mode)
        assert np.abs(fast / table - 1).max() <= 1e-12
        assert fast_oor.tolist() == table_oor.tolist()


def test_submodel_key_is_the_predictors():
    # the key is memoized per KEY_COLUMNS values: it must not depend on other columns (m, n, k)
    pred = LinearPredictor(n_estimators=2).fit(_rows())
    ops = OPS + [GemmOp("x", m, n, k, weight_bytes_per_param=1.000244, compute_dtype="fp8")
                 for m in (1, 31, 32, 4096) for n, k in ((4096, 4096), (1000, 1000))]
    keys = pred.submodel_keys(F.canon_from_ops(ops, "linear")).tolist()
    assert [pred._row_key(LQ, LQ.query_rows(op)[0]) for op in ops] == keys
