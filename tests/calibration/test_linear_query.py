"""The per-op query of token-count families (GEMM, elementwise): exact per-token-count tables,
equal to the compiled forest (and sklearn) on the unquantized features at every count queried."""

import math

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import LinearPredictor, make_predictor
from calibration.predictors.base import DEFAULT_LAUNCH_OVERHEAD_S, TABLE_BLOCK, TOKEN_FIELDS, TOKEN_TABLES
from calibration.predictors.gemm_roofline import keyed_s, roofline_terms
from frontier.ops import ElementwiseOp, GemmOp

SHAPES = ((4096, 4096), (28672, 4096))
MS = (1, 3, 100, 128, 129, 1500, 4097, 9000)    # blocks 0, 0, 0, 0, 1, 11, 32, 70


def _rows() -> pd.DataFrame:
    rows = []
    for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for n, k in ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336)):
            lat = 4e-6 + 2 * m * n * k / 7e14 + n * k * 2 / 3e12 * (1.0 + 0.1 * math.sin(m / 50))
            rows.append({"m": m, "n": n, "k": k, "dtype": "bf16", "timing_mode": "kernel", "latency_s_median": lat})
    return pd.DataFrame(rows)


def _ops():
    return [GemmOp("x", m, n, k) for n, k in SHAPES for m in MS]


@pytest.mark.parametrize("target", ["log", "ratio"])
def test_gemm_tables_equal_the_compiled_forest_at_every_m(target):
    pred = LinearPredictor(n_estimators=4, target=target).fit(_rows())
    ops = _ops()
    got, oor = pred.predict_s(ops, return_mask=True)
    canon = F.canon_from_ops(ops, "linear")
    X = F.featurize(canon, "linear")                          # unquantized features
    # ratio: the roofline fitted per dtype (gemm_roofline), exact at each m
    dtypes = np.asarray(canon["dtype"]).astype(str)
    offset = np.log(keyed_s(roofline_terms(canon), dtypes, pred.roofline)) if target == "ratio" else 0.0
    compiled = pred._compiled_for(("kernel", "bf16"))[0]
    assert np.array_equal(got, np.exp(compiled.predict(X) + offset))
    assert np.abs(got / np.exp(pred.models[("kernel", "bf16")].predict(X) + offset) - 1).max() <= 1e-12
    assert oor.tolist() == [False] * 7 + [True] + [False] * 7 + [True]   # m = 9000 > the largest measured 8192


def test_tables_are_built_once_per_block_and_counted():
    pred = LinearPredictor(n_estimators=4).fit(_rows())
    first = pred.predict_s(_ops())
    assert (pred.memo_lookups, pred.memo_misses, pred.table_rows) == (16, 10, 10 * TABLE_BLOCK)
    walks = []
    compiled = pred._compiled_for(("kernel", "bf16"))[0]
    compiled.predict_monotone = lambda X: walks.append(len(X))   # any further walk would show here
    again = pred.predict_s([GemmOp("y", m, 4096, 4096) for m in (2, 127, 130, 256, 1409, 1536)])
    assert walks == [] and (pred.memo_lookups, pred.memo_misses) == (22, 10)
    assert np.array_equal(pred.predict_s(_ops()), first)
    # launch timing shares the kernel tables (+ one launch per GEMM: no kernel rows timed both ways)
    launch = pred.predict_s(_ops(), "launch")
    assert np.abs(launch - (first + DEFAULT_LAUNCH_OVERHEAD_S)).max() <= 1e-18
    assert pred.memo_misses == 10
    pred.reset_cache()
    assert (pred.memo_lookups, pred.memo_misses, pred.table_rows) == (0, 0, 0)


def test_unknown_dtype_prices_nan_flagged_without_a_table():
    pred = LinearPredictor(n_estimators=2).fit(_rows())
    p, m = pred.predict_s([GemmOp("fp8", 64, 4096, 4096, weight_bytes_per_param=1.0, compute_dtype="fp8")],
                          return_mask=True)
    assert math.isnan(p[0]) and m[0] and pred.table_rows == 0


@pytest.mark.parametrize("latency, choice", [
    (lambda t: 3e-6 + 2 * t * 4096 * 2 * 2 / 2e12, "linear"),
    (lambda t: max(20e-6, 2 * t * 4096 * 2 * 2 / 1e12), "forest"),
], ids=["linear", "forest"])
def test_elementwise_tables_equal_the_model(latency, choice):
    rows = pd.DataFrame([{"op_name": "rms_norm", "num_tokens": t, "hidden_size": 4096, "dtype": "bf16",
                          "timing_mode": "kernel", "latency_s_median": latency(t)} for t in [2 ** i for i in range(13)]])
    pred = make_predictor("elementwise").fit(rows)
    model = pred.models[("kernel", "rms_norm:bf16")]
    assert model.choice == choice
    assert (pred._compiled_for(("kernel", "rms_norm:bf16"))[0] is None) == (choice == "linear")
    ops = [ElementwiseOp("final_norm", t, 4096, 2 * 4096 * 2) for t in (1, 77, 128, 129, 3000, 9000)]
    got, oor = pred.predict_s(ops, return_mask=True)
    X = F.featurize(F.canon_from_ops(ops, "elementwise"), "elementwise")
    assert np.abs(got / np.exp(model.predict(X)) - 1).max() <= 1e-12
    assert oor.tolist() == [False] * 5 + [True]
    assert (pred.memo_lookups, pred.memo_misses) == (6, 4)


def test_token_fields_are_the_canonical_token_counts():
    """The op field TOKEN_FIELDS names is the canonical token column, and ops that differ only
    there share one shape entry; any other field (the op's name, its weight bytes) makes another."""
    for family, op in (("linear", GemmOp("x", 37, 4096, 4096)), ("elementwise", ElementwiseOp("input_norm", 37, 4096, 8192))):
        assert F.canon_row_from_op(op)[1][TOKEN_TABLES[family]] == getattr(op, TOKEN_FIELDS[family]) == 37
    pred = LinearPredictor(n_estimators=2).fit(_rows())
    pred.predict_s([GemmOp("x", m, 4096, 4096) for m in (1, 700, 5000)] + [GemmOp("x", 3, 28672, 4096)])
    assert len(pred._shape_cache) == 2
    pred.predict_s([GemmOp("y", 3, 4096, 4096), GemmOp("x", 3, 4096, 4096, weight_bytes_per_param=1.0)], "launch")
    assert len(pred._shape_cache) == 4     # by timing mode too; the fp8-weight op has no sub-model: NaN
    assert [t for t, _ in pred.price_ops([GemmOp("z", 3, 4096, 4096)], "kernel")] == \
        [t for t, _ in pred.price_ops([GemmOp("x", 3, 4096, 4096)], "kernel")]


def test_price_op_names_the_families_it_prices():
    comm = make_predictor("comm")
    with pytest.raises(ValueError, match=r"price_op prices \['attention', 'elementwise', 'linear', 'moe'\] ops, not 'comm'"):
        comm.price_op(None, "kernel")
    with pytest.raises(ValueError, match="timing_mode='graph'"):
        LinearPredictor(n_estimators=2).fit(_rows()).price_op(GemmOp("x", 3, 4096, 4096), "graph")
