"""The gdn family (Gated DeltaNet's gated delta rule and causal conv1d): an op and its measured row
share features, a mixed op is priced as its two kernels, held-out error on AIConfigurator's H100
tables against the token-count baseline, and the simulator's cost model prices GdnOps from the bundle."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from calibration import features as F
from calibration.evaluate import evaluate_family
from calibration.importers.aiconfigurator import import_aiconfigurator
from calibration.predictors import GdnPredictor
from frontier.ops import GdnOp
from frontier.profile_schema import read_profiles

AIC = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "aiconfigurator"
pytestmark = pytest.mark.skipif(not (AIC / "systems" / "data").is_dir(), reason=f"AIC data absent at {AIC}")


@pytest.fixture(scope="module")
def gdn_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("aic_h100_gdn")
    import_aiconfigurator(AIC, out, gpus=["h100_sxm"], families=["gdn"])
    return read_profiles(out, "gdn", "H100-SXM")


@pytest.fixture(scope="module")
def gdn_pred(gdn_rows):
    return GdnPredictor().fit(gdn_rows)


def test_ops_feature_as_their_rows(gdn_rows):
    """Qwen3.5-35B-A3B at TP 1 (16 key / 32 value heads): 4 prefills of 2,048 tokens are the chunked
    row of batch 4 x 2,048; 64 decodes the recurrent row of batch 64."""
    def row(op_name, batch, seq):
        r = gdn_rows[(gdn_rows.op_name == op_name) & (gdn_rows.batch_size == batch) & (gdn_rows.seq_len == seq)
                     & (gdn_rows.num_k_heads == 16) & (gdn_rows.num_v_heads == 32)]
        return r.iloc[[0]]

    for op, r in ((GdnOp((2048,) * 4, 0, 32, 128, 128, 16), row("chunked", 4, 2048)),
                  (GdnOp((), 64, 32, 128, 128, 16), row("recurrent", 64, 1)),
                  (GdnOp((2048,) * 4, 0, 32, 128, 128, 16, kernel="conv1d"), row("conv1d", 4, 2048)),
                  (GdnOp((), 64, 32, 128, 128, 16, kernel="conv1d"), row("conv1d_update", 64, 1))):
        assert np.array_equal(F.featurize(F.canon_from_rows(r, "gdn"), "gdn"),
                              F.featurize(F.canon_from_ops([op], "gdn"), "gdn"))
    # unequal prefills: the longest is the sequential depth, the tokens are summed
    row = F.gdn_canon_row(GdnOp((100, 3000, 7), 0, 32, 128, 128, 16))
    assert (row["op_name"], row["batch_size"], row["seq_len"], row["num_tokens"]) == ("chunked", 3, 3000, 3107)
    # a verify: 8 decodes with 2 drafts each, 3 tokens a sequence, a bf16 state
    assert F.gdn_canon_row(GdnOp((), 8, 32, 128, 128, 16, 2.0, spec_tokens=16)) == {
        "op_name": "recurrent", "batch_size": 8, "seq_len": 3, "num_tokens": 24, "num_k_heads": 16,
        "num_v_heads": 32, "head_k_dim": 128, "head_v_dim": 128, "state_dtype": "bf16", "d_conv": 4}
    mixed = GdnOp((500,), 8, 32, 128, 128, 16, spec_tokens=8)
    assert mixed.kernel_parts() == (GdnOp((500,), 0, 32, 128, 128, 16), GdnOp((), 8, 32, 128, 128, 16, spec_tokens=8))
    with pytest.raises(ValueError, match="runs two kernels"):
        F.gdn_canon_row(mixed)


@pytest.mark.parametrize("holdout_by", ["rows", "token-points"])
def test_heldout_error_against_the_token_count_baseline(gdn_rows, holdout_by):
    """20 % held out, seed 0 (measured: rows p50 0.39 / p95 2.13 %, token points 0.60 / 3.54 %;
    the token-count baseline's p95 74.8 / 71.5 %). The tables repeat the same work closely, as
    the other families' do; a batch of unequal prefills, which they do not hold, is priced from
    its longest sequence and its token total."""
    err, _ = evaluate_family(gdn_rows, "gdn", 0.2, 0, {}, holdout_by)
    assert (err.train_rows + err.rows) == 4141 + 405 + 4141 + 407
    assert err.p95 < (2.5 if holdout_by == "rows" else 4.0) and err.baseline_p95 > 70
    assert set(err.submodels) == {"kernel:chunked", "kernel:recurrent", "kernel:conv1d", "kernel:conv1d_update"}


def test_cost_model_prices_gdn_ops_from_the_bundle(gdn_pred):
    """The simulator's query: a mixed op is its two kernels' sum, each priced by value; a verify's
    several tokens a decode lie outside the measured rows (flagged)."""
    from calibration.bundle import Bundle
    from frontier.gpu import get_gpu
    from simulator.cost_model import RooflineCostModel
    from simulator.predictor_cost import PredictorCostModel

    gpu = get_gpu("H100")
    model = PredictorCostModel(Bundle({"gdn": gdn_pred}, {"gpu": gpu.name}), RooflineCostModel(gpu))
    prefill, decodes = GdnOp((2048, 512), 0, 32, 128, 128, 16), GdnOp((), 24, 32, 128, 128, 16)
    mixed = GdnOp((2048, 512), 24, 32, 128, 128, 16)
    a, b, both = model.op_times_s([prefill, decodes, mixed], "kernel")
    assert both == a + b and a > b > 0
    assert (model.num_predicted, model.num_out_of_range, model.num_fallback) == (3, 0, 0)
    model.op_times_s([GdnOp((), 24, 32, 128, 128, 16, spec_tokens=48)], "kernel")
    assert (model.num_predicted, model.num_out_of_range) == (4, 1)
    a, b, both = model.op_times_s([dataclasses.replace(op, kernel="conv1d") for op in (prefill, decodes, mixed)],
                                  "kernel")
    assert both == a + b and a > b > 0 and model.num_fallback == 0


def test_calibrate_and_predict_gdn_rows_from_the_cli(tmp_path):
    """`frontier calibrate` on gdn profiles writes a bundle with the family (held-out error in the
    manifest); `frontier predict` prices gdn operator rows and refuses a self-contradicting one."""
    import json

    from typer.testing import CliRunner

    from frontier.cli import app

    profiles, bundle = tmp_path / "profiles", tmp_path / "h100.joblib"
    import_aiconfigurator(AIC, profiles, gpus=["h100_sxm"], families=["gdn"])
    runner = CliRunner()
    res = runner.invoke(app, ["calibrate", "--profiles", str(profiles), "--gpu", "H100-SXM", "--out", str(bundle)])
    assert res.exit_code == 0, res.output
    report = json.loads(runner.invoke(app, ["evaluate", "--bundle", str(bundle), "--json"]).output)
    assert set(report["families"]) == {"gdn"} and report["families"]["gdn"]["rows"] == 1819
    header = ("family,op_name,batch_size,seq_len,num_tokens,num_k_heads,num_v_heads,head_k_dim,head_v_dim,"
              "state_dtype,d_conv\n")
    ops = tmp_path / "ops.csv"
    ops.write_text(header + "gdn,chunked,4,2048,8192,16,32,128,128,fp32,4\ngdn,recurrent,64,1,64,16,32,128,128,fp32,4\n"
                   "gdn,conv1d_update,64,1,64,16,32,128,128,bf16,4\n")
    res = runner.invoke(app, ["predict", "--bundle", str(bundle), "--input", str(ops)])
    assert res.exit_code == 0, res.output
    rows = [line.split(",") for line in res.output.strip().splitlines()[1:]]
    assert [r[-1] for r in rows] == ["False"] * 3 and all(float(r[-2]) > 0 for r in rows)
    ops.write_text(header + "gdn,chunked,4,2048,9000,16,32,128,128,fp32,4\n")
    res = runner.invoke(app, ["predict", "--bundle", str(bundle), "--input", str(ops)])
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == (
        f"error: {ops} line 2: gdn row has num_tokens=9000 outside [seq_len + batch_size - 1, batch_size x seq_len] "
        "= [2051, 8192]")
