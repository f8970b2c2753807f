"""The per-op MoE query: scalar features equal to calibration.features, and predict_s equal to
predict_canon (the 1/64 grid) in both timing modes."""

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


def test_scalar_path_equals_predict_canon():
    pred = make_predictor("moe", n_estimators=4).fit(_rows())
    for mode in ("kernel", "launch"):
        pred.reset_cache()
        fast, fast_oor = pred.predict_s(OPS, mode, return_mask=True)
        assert pred._scalar_ok is True and (pred.memo_lookups, pred.memo_misses) == (5, 5)   # fp8: no sub-model
        table, table_oor = pred.predict_canon(F.canon_from_ops(OPS, "moe"), mode)
        ok = np.isfinite(table)
        assert ok.tolist() == [True] * 5 + [False] * 2 and np.isnan(fast[~ok]).all()
        assert np.abs(fast[ok] / table[ok] - 1).max() <= 1e-12
        assert fast_oor.tolist() == table_oor.tolist() == [False, False, False, True, False, True, True]   # 3000 > 2048 tokens
    misses = pred.memo_misses                           # 5 scalar + 5 predict_canon (its own memo)
    again = pred.predict_s(OPS[:4], "launch")          # the same cells: no new model walk
    assert misses == 10 and pred.memo_misses == 10 and np.array_equal(again, fast[:4])
    assert math.isnan(pred.predict_s([OPS[5]])[0])
