"""Elementwise predictor: simulator op -> profiled kernel mapping, and the per-sub-model pick of
linear regression vs forest by held-out error."""

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import make_predictor
from frontier.ops import ElementwiseOp

TOKENS = [2 ** i for i in range(13)]   # 1 .. 4096


def _rows(shape, width=4096):
    """rms_norm rows whose latency = reference_s x shape(tokens) (launch: x 1.5)."""
    out = []
    for t in TOKENS:
        canon = {"op_name": np.array(["rms_norm"]), "num_tokens": np.array([t]), "hidden_size": np.array([width]),
                 "dtype": np.array(["bf16"])}
        ref = F.reference_s(canon, "elementwise")[0]
        for mode, factor in (("kernel", 1.0), ("launch", 1.5)):
            out.append({"op_name": "rms_norm", "num_tokens": t, "hidden_size": width, "dtype": "bf16",
                        "timing_mode": mode, "latency_s_median": ref * shape(t) * factor})
    return pd.DataFrame(out)


def test_simulator_ops_map_onto_profiled_kernels_and_widths():
    # tiny llama at tp=1: hidden 64, 4 heads + 2 KV heads of 16, intermediate 128, bf16 activations
    ops = [ElementwiseOp("input_norm", 8, 64, 4 * 64 * 2), ElementwiseOp("final_norm", 8, 64, 2 * 64 * 2),
           ElementwiseOp("rotary", 8, 64, 2 * (4 + 2) * 16 * 2), ElementwiseOp("mlp_act", 8, 128, 3 * 128 * 2),
           ElementwiseOp("shared_act", 8, 32, 3 * 32 * 2), ElementwiseOp("sampler", 8, 256, 8 * 256)]
    canon = F.canon_from_ops(ops, "elementwise")
    assert canon["op_name"].tolist() == ["fused_add_rms_norm", "rms_norm", "rotary_embedding", "silu_and_mul",
                                         "silu_and_mul", "sampler"]
    assert canon["hidden_size"].tolist() == [64, 64, 96, 128, 32, 512]
    assert set(canon["dtype"]) == {"bf16"}
    # bytes moved of the canonical row = the op's own bytes
    assert F.featurize(canon, "elementwise")[:5, 2].tolist() == pytest.approx(np.log2(1 + np.array(
        [op.bytes_moved for op in ops[:5]])).tolist())


def test_power_law_picks_linear_regression_and_extrapolates():
    pred = make_predictor("elementwise").fit(_rows(lambda t: t ** 0.25))
    choice = pred.describe()["model_choice"]
    assert {k: v["model"] for k, v in choice.items()} == {"kernel:rms_norm:bf16": "linear",
                                                          "launch:rms_norm:bf16": "linear"}
    assert choice["kernel:rms_norm:bf16"]["heldout_mape"]["linear"] < 1e-3
    assert choice["kernel:rms_norm:bf16"]["heldout_mape"]["forest"] == pytest.approx(5.585304615798559)
    op = ElementwiseOp("final_norm", 16384, 4096, 2 * 4096 * 2)           # 4x beyond the grid
    (t,), (oor,) = pred.predict_s([op], "kernel", return_mask=True)
    assert oor and t == pytest.approx(F.reference_s(F.canon_from_ops([op], "elementwise"), "elementwise")[0]
                                      * 16384 ** 0.25, rel=1e-6)


def test_launch_floor_picks_the_forest():
    pred = make_predictor("elementwise").fit(_rows(lambda t: 3.0 if t <= 16 else 1.0))
    pick = pred.describe()["model_choice"]["kernel:rms_norm:bf16"]
    assert pick["model"] == "forest" and pick["heldout_mape"]["forest"] == 0.0
    assert pick["heldout_mape"]["linear"] == pytest.approx(39.57530928715855)


def test_unknown_kernel_or_dtype_prices_nan():
    pred = make_predictor("elementwise").fit(_rows(lambda t: 1.0))
    ops = [ElementwiseOp("embedding", 8, 4096, 2 * 4096 * 2), ElementwiseOp("rotary", 8, 4096, 2 * 4096 * 2),
           ElementwiseOp("final_norm", 8, 4096, 2 * 4096 * 2)]
    t = pred.predict_s(ops, "kernel")
    assert np.isnan(t[0]) and np.isnan(t[1]) and t[2] > 0
