"""Elementwise predictor: simulator op -> profiled kernel mapping, and the per-sub-model pick of
linear regression vs forest by held-out error."""

import numpy as np
import pandas as pd
import pytest

from calibration import features as F
from calibration.predictors import make_predictor
from frontier.ops import ElementwiseOp

TOKENS = [2 ** i for i in range(13)]   # 1 .. 4096


def _bytes(t, width=4096):
    return 2 * t * width * 2            # rms_norm in bf16: read + write of [t, width]


def _rows(latency_s, width=4096):
    """rms_norm rows of latency_s(tokens) (launch: + 4 us)."""
    return pd.DataFrame([{"op_name": "rms_norm", "num_tokens": t, "hidden_size": width, "dtype": "bf16",
                          "timing_mode": mode, "latency_s_median": latency_s(t) + extra}
                         for t in TOKENS for mode, extra in (("kernel", 0.0), ("launch", 4e-6))])


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


def test_bandwidth_line_picks_linear_regression_and_extrapolates():
    """latency = 3 us + bytes / 2 TB/s: the linear candidate is exact, also 4x past the grid."""
    pred = make_predictor("elementwise").fit(_rows(lambda t: 3e-6 + _bytes(t) / 2e12))
    choice = pred.describe()["model_choice"]
    assert {k: v["model"] for k, v in choice.items()} == {"kernel:rms_norm:bf16": "linear",
                                                          "launch:rms_norm:bf16": "linear"}
    assert choice["kernel:rms_norm:bf16"]["heldout_mape"]["linear"] < 1e-9
    assert choice["kernel:rms_norm:bf16"]["heldout_mape"]["forest"] == pytest.approx(18.1737489775014)
    op = ElementwiseOp("final_norm", 16384, 4096, 2 * 4096 * 2)
    (t,), (oor,) = pred.predict_s([op], "kernel", return_mask=True)
    assert oor and t == pytest.approx(3e-6 + _bytes(16384) / 2e12, rel=1e-9)


def test_launch_floor_picks_the_forest():
    """latency = max(20 us, bytes / 1 TB/s): flat up to ~1.2k tokens, where a line cannot bend."""
    pred = make_predictor("elementwise").fit(_rows(lambda t: max(20e-6, _bytes(t) / 1e12)))
    pick = pred.describe()["model_choice"]["kernel:rms_norm:bf16"]
    assert pick["model"] == "forest" and pick["heldout_mape"]["forest"] < 1e-9
    assert pick["heldout_mape"]["linear"] == pytest.approx(3.912939094413681)


def test_unknown_kernel_or_dtype_prices_nan():
    pred = make_predictor("elementwise").fit(_rows(lambda t: 3e-6 + _bytes(t) / 2e12))
    ops = [ElementwiseOp("embedding", 8, 4096, 2 * 4096 * 2), ElementwiseOp("rotary", 8, 4096, 2 * 4096 * 2),
           ElementwiseOp("final_norm", 8, 4096, 2 * 4096 * 2)]
    t = pred.predict_s(ops, "kernel")
    assert np.isnan(t[0]) and np.isnan(t[1]) and t[2] > 0


def test_only_the_log_target():
    with pytest.raises(ValueError, match=r"^elementwise target='ratio'; valid: log"):
        make_predictor("elementwise", target="ratio")


def test_bundle_round_trip_of_both_choices_without_sklearn(tmp_path):
    """A saved bundle keeps each sub-model's choice: the forest as its CompiledForest inside the
    wrapper, the linear fit as it is; a fresh process prices both without importing sklearn."""
    import json
    import subprocess
    import sys

    from calibration.bundle import load_bundle, save_bundle
    from calibration.predictors.tree_eval import CompiledForest
    line = make_predictor("elementwise").fit(_rows(lambda t: 3e-6 + _bytes(t) / 2e12))
    floor = make_predictor("elementwise").fit(_rows(lambda t: max(20e-6, _bytes(t) / 1e12)))
    ops = [ElementwiseOp("final_norm", t, 4096, 2 * 4096 * 2) for t in (1, 100, 3000)]
    for name, pred in (("line", line), ("floor", floor)):
        path = tmp_path / f"{name}.joblib"
        save_bundle(path, {"elementwise": pred}, {"gpu": "H100", "framework": "vllm", "framework_version": "t"})
        loaded = load_bundle(path).predictor("elementwise")
        kinds = {type(m.model).__name__ for m in loaded.models.values()}
        assert kinds == ({"BytesLinear"} if name == "line" else {CompiledForest.__name__})
        assert loaded.describe()["model_choice"] == pred.describe()["model_choice"]
        want = pred.predict_s(ops, "kernel").tolist()
        code = ("import sys; from calibration.bundle import load_bundle; from frontier.ops import ElementwiseOp; "
                f"p = load_bundle({str(path)!r}).predictor('elementwise'); "
                "print(p.predict_s([ElementwiseOp('final_norm', t, 4096, 2 * 4096 * 2) for t in (1, 100, 3000)], "
                "'kernel').tolist()); print('sklearn' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
        assert json.loads(out[0]) == want and out[1] == "False"
