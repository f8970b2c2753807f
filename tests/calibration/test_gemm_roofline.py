"""The GEMM roofline fitted per dtype (the linear family's ratio reference) and the token
tables it feeds: exact on noiseless rows, floored, NaN for a dtype without rows, and every
table block still one monotone forest walk."""

import math

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import LinearPredictor
from calibration.predictors.base import TABLE_BLOCK
from calibration.predictors.gemm_roofline import MIN_FIXED_S, TERMS, fit_roofline, keyed_s, roofline_terms
from frontier.ops import GemmOp

TRUE = {"bf16": (3e-6, 1 / 8e14, 1 / 3e12, 1 / 2e12), "fp8": (7e-5, 1 / 1.6e15, 1 / 3e12, 1 / 2.5e12)}


def _rows(coefs=TRUE) -> pd.DataFrame:
    rows = []
    for dtype, c in coefs.items():
        for m in (1, 8, 64, 512, 4096):
            for n, k in ((1024, 4096), (4096, 4096), (14336, 4096), (4096, 14336)):
                wb = 2.0 if dtype == "bf16" else 1.0
                lat = c[0] + 2 * m * n * k * c[1] + n * k * wb * c[2] + 2 * (m * k + m * n) * c[3]
                rows.append({"m": m, "n": n, "k": k, "dtype": dtype, "timing_mode": "kernel",
                             "latency_s_median": lat})
    return pd.DataFrame(rows)


def test_terms_of_one_row():
    canon = {"m": np.array([3]), "n": np.array([5]), "k": np.array([7]), "dtype": np.array(["fp8"])}
    assert roofline_terms(canon).tolist() == [[1.0, 210.0, 35.0, 72.0]]   # 2mnk, nk x 1 B, 2(mk + mn)


def test_fit_recovers_the_coefficients_of_noiseless_rows():
    df = _rows()
    for dtype, true in TRUE.items():
        sel = df[df.dtype == dtype]
        coef = fit_roofline(roofline_terms(F.canon_from_rows(sel, "linear")), sel.latency_s_median.to_numpy())
        assert coef == pytest.approx(np.array(true), rel=1e-6)


def test_fixed_term_is_floored_and_unknown_dtype_is_nan():
    df = _rows({"bf16": (0.0, 1 / 8e14, 0.0, 0.0)})              # pure compute: no fixed time
    coef = fit_roofline(roofline_terms(F.canon_from_rows(df, "linear")), df.latency_s_median.to_numpy())
    assert coef[0] == MIN_FIXED_S and coef[1] == pytest.approx(1 / 8e14, rel=1e-9)
    canon = {"m": np.array([64, 64]), "n": np.array([4096, 4096]), "k": np.array([4096, 4096]),
             "dtype": np.array(["bf16", "nvfp4"])}
    got = keyed_s(roofline_terms(canon), np.asarray(canon["dtype"]).astype(str), {"bf16": coef})
    assert got[0] == pytest.approx(MIN_FIXED_S + 2 * 64 * 4096 * 4096 / 8e14, rel=1e-12) and math.isnan(got[1])


def test_predictor_fits_one_roofline_per_dtype_and_prices_on_it():
    pred = LinearPredictor(n_estimators=4).fit(_rows())
    assert pred.target == "ratio" and sorted(pred.roofline) == ["bf16", "fp8"]
    assert pred.roofline["fp8"] == pytest.approx(np.array(TRUE["fp8"]), rel=1e-6)
    assert pred.describe()["roofline"]["bf16"] == {t: pytest.approx(v, rel=1e-6) for t, v in zip(TERMS, TRUE["bf16"])}
    # noiseless rows: the forest learns log(1) = 0 everywhere, so a price is the roofline itself
    op = GemmOp("x", 300, 4096, 4096)
    expected = 3e-6 + 2 * 300 * 4096 * 4096 / 8e14 + 4096 * 4096 * 2 / 3e12 + 2 * (300 * 4096 * 2) / 2e12
    assert pred.predict_s([op])[0] == pytest.approx(expected, rel=1e-9)
    log_pred = LinearPredictor(n_estimators=4, target="log").fit(_rows())
    assert log_pred.roofline == {} and "roofline" in log_pred.describe()


def test_every_table_block_is_one_monotone_walk():
    pred = LinearPredictor(n_estimators=4).fit(_rows())
    compiled = pred._compiled_for(("kernel", "bf16"))[0]
    walks, walk = [], compiled.predict_monotone
    compiled.predict_monotone = lambda X: walks.append(len(X)) or walk(X)
    try:
        ms = (1, 17, 33, 127, 128, 129, 1000, 4097, 9000)          # blocks 0, 0, 0, 0, 0, 1, 7, 32, 70
        pred.predict_s([GemmOp("x", m, n, 4096) for n in (4096, 14336) for m in ms])
    finally:
        del compiled.predict_monotone
    assert walks == [TABLE_BLOCK] * 10 and pred.memo_misses == 10
    # the 16- and 32-row tile features grow with m inside every block (what the walk needs)
    for first in (1, 129, 8065):
        m = np.arange(first, first + TABLE_BLOCK)
        canon = {"m": m, "n": np.full(TABLE_BLOCK, 14336), "k": np.full(TABLE_BLOCK, 4096),
                 "dtype": np.full(TABLE_BLOCK, "bf16")}
        assert (np.diff(F.featurize(canon, "linear"), axis=0) >= 0).all()
