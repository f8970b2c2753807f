"""The per-op MoE query: scalar features equal to calibration.features, memo cells on the load
statistics (sklearn on the cell's row, the cell's out-of-range flag) and, at a fine grid, the
unquantized sklearn prediction, in both timing modes."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import make_predictor
from calibration.predictors import moe_query as MQ
from frontier.ops import MoeOp


def _op(tokens, loads=None, dtype="bf16", wb=2.0):
    pairs = sum(loads) if loads else max(1, -(-tokens * 8 * 16 // 128))
    return MoeOp(tokens, 128, 16, 8, 2048, 768, pairs, wb, 2.0, dtype, loads)


OPS = [_op(1), _op(37), _op(512), _op(3000), _op(64, (40,) + (30,) * 14 + (2,)),
       _op(100, dtype="fp8", wb=1.0), _op(100, dtype="fp8", wb=1.000244)]


def _rows() -> pd.DataFrame:
    rows = []
    for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048):
        for dist in ("balanced", "power_law_1.2"):
            lat = 8e-6 + t * 8 * 2048 * 768 * 6 / 4e14 * (1.3 if dist != "balanced" else 1.0)
            rows.append({"num_tokens": t, "hidden_size": 2048, "inter_size": 768, "topk": 8, "num_experts": 128,
                         "moe_tp_size": 1, "moe_ep_size": 8, "moe_dtype": "bf16", "distribution": dist,
                         "timing_mode": "kernel", "latency_s_median": lat})
    return pd.DataFrame(rows)


def test_scalar_rows_equal_numpy_features():
    rng = np.random.default_rng(0)      # + loads whose variance numpy and the scalar path compute differently
    loads = [tuple(int(x) for x in rng.integers(0, 5000, size=16)), (7,) * 16, (0,) * 15 + (123456,)]
    for op in OPS + [_op(5000, lo) for lo in loads]:
        (row,) = MQ.query_rows(op)
        want = F.canon_row_from_op(op)[1]
        assert row.keys() == want.keys() and row["moe_dtype"] == want["moe_dtype"]
        assert [float(row[k]) for k in want if k != "moe_dtype"] == \
            pytest.approx([float(want[k]) for k in want if k != "moe_dtype"], rel=1e-12)
        table = F.canon_from_records([row], "moe")
        assert MQ.feature_row(row) == pytest.approx(F.featurize(table, "moe")[0].tolist(), rel=1e-12, abs=1e-12)
        assert MQ.reference_row(row) == pytest.approx(F.reference_s(table, "moe")[0], rel=1e-12)


def _sklearn(pred, mode, rows, refs):
    """sklearn on canonical rows x their reference times (+ the launch shift), seconds."""
    mkey, shift = pred._model_for(mode, "bf16")
    X = np.asarray([MQ.feature_row(r) for r in rows])
    return np.exp(pred.models[mkey].predict(X)) * np.asarray(refs) + shift, X


def test_query_is_sklearn_on_the_cell_rows():
    pred = make_predictor("moe", n_estimators=4).fit(_rows())
    for mode in ("kernel", "launch"):
        pred.reset_cache()
        got, oor = pred.predict_s(OPS, mode, return_mask=True)
        assert pred._scalar_ok is True and (pred.memo_lookups, pred.memo_misses) == (5, 5)   # fp8: no sub-model
        assert np.isnan(got[5:]).all() and oor[5:].all()
        parts = [MQ.cell_parts(op, roofline=pred.roofline)[0] for op in OPS[:5]]
        want, X = _sklearn(pred, mode, [MQ.cell_row(s, c) for s, c, _ in parts], [r for _, _, r in parts])
        assert np.abs(got[:5] / want - 1).max() <= 1e-12
        lo, hi = pred.ranges[("kernel", "bf16")]
        assert oor[:5].tolist() == ((X < lo - 1e-6) | (X > hi + 1e-6)).any(axis=1).tolist() == \
            [False, False, False, True, False]                                               # 3000 > 2048 tokens
    again = pred.predict_s(OPS[:4], "launch")          # the same cells: no new model walk
    assert pred.memo_misses == 5 and np.array_equal(again, got[:4])
    # a cell is the grid index of tokens, routed pairs (the mean EP rank's share T k / ep, as on
    # the training rows, not the rank's own 462), max load and load std (1/16 in log2)
    q = lambda x: round(math.log2(1 + x) * 16)        # noqa: E731
    op = OPS[4]
    std = math.sqrt(np.var(op.tokens_per_expert))
    assert MQ.cell_parts(op)[0][1] == (q(64), q(64 * 8 / 8), q(40), q(std))
    assert MQ.canon_row(op)["routed_pairs"] == 64.0 and op.routed_pairs == 462


def test_fine_grid_query_equals_unquantized_sklearn(monkeypatch):
    monkeypatch.setattr(MQ, "QUERY_CELLS", 2.0 ** 30)
    pred = make_predictor("moe", n_estimators=4).fit(_rows())
    ops = OPS[:5] + [_op(700, tuple(range(100, 116)))]
    for mode in ("kernel", "launch"):
        pred.reset_cache()
        got = pred.predict_s(ops, mode)
        rows = [MQ.canon_row(op) for op in ops]
        want, _ = _sklearn(pred, mode, rows, [MQ.reference_row(r, pred.roofline["bf16"]) for r in rows])
        assert np.abs(got / want - 1).max() <= 1e-9


def test_a_shape_is_derived_once_per_op_shape():
    """cell_parts derives the SHAPE_COLUMNS values from the op's fields other than tokens,
    routed pairs and per-expert loads, once; the reference time is reference_row's."""
    MQ._shape_of.cache_clear()
    a, b = OPS[4], dataclasses.replace(OPS[4], tokens=28, routed_pairs=224, tokens_per_expert=(14,) * 16)
    (sa, _, ra), = MQ.cell_parts(a)
    (sb, _, rb), = MQ.cell_parts(b)
    assert sa == sb == tuple(MQ.canon_row(a)[c] for c in MQ.SHAPE_COLUMNS)
    assert MQ._shape_of.cache_info().misses == 1
    assert ra == MQ.reference_row(MQ.canon_row(a)) and rb == MQ.reference_row(MQ.canon_row(b))
    for other in (dataclasses.replace(a, moe_tp=2), OPS[5], OPS[6]):     # sharding, fp8, fp8 block
        assert MQ.cell_parts(other)[0][0] == tuple(MQ.canon_row(other)[c] for c in MQ.SHAPE_COLUMNS)
    assert MQ._shape_of.cache_info().misses == 4


def test_fitted_roofline_and_its_scalar_twin():
    """The MoE reference is a roofline fitted per dtype (moe_roofline): on rows that follow such a
    law exactly the fit recovers it, the scalar twin equals the numpy terms, and a query's
    reference is that roofline at the query's own pairs and largest load (NaN for a dtype
    without coefficients; no fit at all, roofline None: the nominal reference_row)."""
    from calibration.predictors.moe_roofline import TERMS, roofline_terms

    coef = np.array([6e-6, 1 / 3e14, 1 / 2.5e12, 1 / 4e12, 1 / 1e14])
    rows = _rows()
    table = F.canon_from_rows(rows, "moe")
    pred = make_predictor("moe", n_estimators=2).fit(rows.assign(latency_s_median=roofline_terms(table) @ coef))
    assert list(pred.roofline) == ["bf16"] and pred.roofline["bf16"] == pytest.approx(coef.tolist(), rel=1e-6)
    assert pred.describe()["roofline"]["bf16"] == dict(zip(TERMS, pred.roofline["bf16"]))
    for op in OPS + [_op(700, tuple(range(100, 116)))]:
        (row,) = MQ.query_rows(op)
        terms = roofline_terms(F.canon_from_records([row], "moe"))[0]
        assert MQ.reference_row(row, coef) == pytest.approx(float(terms @ coef), rel=1e-12)
        (shape, _, ref), = MQ.cell_parts(op, roofline={"bf16": tuple(coef), "fp8": tuple(2 * coef)})
        want = coef if row["moe_dtype"] == "bf16" else 2 * coef if row["moe_dtype"] == "fp8" else None
        if want is None:
            assert math.isnan(ref)                                   # fp8 block-scaled: no coefficients
        else:
            assert ref == pytest.approx(MQ.reference_row(row, want), rel=1e-12)
        assert MQ.cell_parts(op)[0][2] == MQ.reference_row(row)           # no fit: the nominal reference
        assert math.isnan(MQ.cell_parts(op, roofline={})[0][2])           # a fit without this dtype
    # skew costs more than its pairs say: the largest-expert term
    even, skewed = _op(64, (32,) * 16), _op(64, (302,) + (14,) * 15)
    assert even.routed_pairs == skewed.routed_pairs
    assert MQ.cell_parts(skewed, roofline=pred.roofline)[0][2] > MQ.cell_parts(even, roofline=pred.roofline)[0][2]
