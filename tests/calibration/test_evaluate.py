"""Held-out split, APE metrics, the token-count-only baseline, and the calibrate /
evaluate / predict commands end to end on a small profile root."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from calibration.evaluate import ape, baseline_predict, holdout_mask
from calibration.importers.aiconfigurator import import_aiconfigurator
from frontier.cli import app
from frontier.profile_schema import read_profiles, write_profile

AIC = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "aiconfigurator"
needs_aic = pytest.mark.skipif(not (AIC / "systems" / "data").is_dir(), reason=f"AIC data absent at {AIC}")


def _gemm_rows(ms, nks, f) -> pd.DataFrame:
    rows = [{"m": m, "n": n, "k": k, "dtype": "bf16", "timing_mode": "kernel", "latency_s_median": f(m, n, k)}
            for m in ms for n, k in nks]
    return pd.DataFrame(rows)


def test_holdout_holds_out_whole_token_points():
    df = _gemm_rows(range(1, 101), [(128, 128), (256, 512)], lambda m, n, k: 1e-6 * m)
    mask = holdout_mask(df, "linear", 0.2, 7, "token-points")
    held = set(df.m[mask])
    assert len(held) == 20 and not held & set(df.m[~mask])
    assert mask.sum() == 40
    assert np.array_equal(mask, holdout_mask(df, "linear", 0.2, 7, "token-points"))
    assert not np.array_equal(mask, holdout_mask(df, "linear", 0.2, 8, "token-points"))
    with pytest.raises(ValueError, match="holdout_fraction"):
        holdout_mask(df, "linear", 1.0, 0, "token-points")


def test_holdout_by_rows_draws_single_rows():
    df = _gemm_rows(range(1, 101), [(128, 128), (256, 512)], lambda m, n, k: 1e-6 * m)
    mask = holdout_mask(df, "linear", 0.2, 7)            # default: rows
    assert mask.dtype == bool and mask.sum() == 40       # round(0.2 x 200) rows
    assert np.array_equal(mask, holdout_mask(df, "linear", 0.2, 7, "rows"))
    assert not np.array_equal(mask, holdout_mask(df, "linear", 0.2, 8, "rows"))
    # the same seed draws exactly these rows (numpy default_rng(7) over 200 row indices)
    expect = np.zeros(200, dtype=bool)
    expect[np.random.default_rng(7).choice(200, size=40, replace=False)] = True
    assert np.array_equal(mask, expect)
    # unlike token points, some m keep one shape in training while the other is held out
    split = df.assign(h=mask).groupby("m").h.nunique()
    assert (split == 2).sum() > 0
    assert holdout_mask(df.iloc[:3], "linear", 0.01, 0).sum() == 1   # at least one row
    with pytest.raises(ValueError, match="holdout_by='shapes'; valid: rows, token-points"):
        holdout_mask(df, "linear", 0.2, 0, "shapes")


def test_ape_and_token_baseline_are_exact_on_linear_data():
    assert ape(np.array([1.1, 0.9, 2.0]), np.array([1.0, 1.0, 1.0])) == pytest.approx([10.0, 10.0, 100.0])
    f = {(128, 128): (2e-6, 1e-8), (256, 512): (5e-6, 4e-8)}
    df = _gemm_rows(range(1, 101), list(f), lambda m, n, k: f[(n, k)][0] + f[(n, k)][1] * m)
    mask = holdout_mask(df, "linear", 0.3, 0)
    pred = baseline_predict(df[~mask], df[mask], "linear")
    assert np.allclose(pred, df.latency_s_median[mask], rtol=1e-9)


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    """H100 profiles cut to a few shapes: GEMM bf16 (n, k) in {2048, 4096}^2 and nccl/vLLM collectives."""
    full = tmp_path_factory.mktemp("aic_full")
    import_aiconfigurator(AIC, full, gpus=["h100_sxm"], families=["linear", "comm"])
    root = tmp_path_factory.mktemp("small")
    lin = read_profiles(full, "linear", "H100-SXM")
    lin = lin[(lin.dtype == "bf16") & lin.n.isin([2048, 4096]) & lin.k.isin([2048, 4096])]
    write_profile(lin, root, "linear", "H100-SXM")
    write_profile(read_profiles(full, "comm", "H100-SXM"), root, "comm", "H100-SXM")
    return root


@needs_aic
def test_calibrate_evaluate_predict_cli(small_root, tmp_path):
    runner = CliRunner()
    out = tmp_path / "h100.joblib"
    res = runner.invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                              "--framework-version", "0.24.0", "--out", str(out), "--split-seed", "3",
                              "--holdout-by", "token-points"])
    assert res.exit_code == 0, res.output
    assert "linear" in res.output and "comm" in res.output and out.is_file()
    res = runner.invoke(app, ["evaluate", "--bundle", str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["gpu"] == "H100-SXM" and report["framework_version"] == "0.24.0"
    assert report["frameworks"] == [["vllm", "0.24.0"]]
    assert report["split"]["split_seed"] == 3 and report["split"]["holdout_by"] == "token-points"
    lin = report["families"]["linear"]
    assert set(lin) == {"rows", "p50", "p95", "mape", "baseline_p50", "baseline_p95", "baseline_mape", "out_of_range",
                        "submodels"}
    assert lin["rows"] == 60 and 0 < lin["p50"] <= lin["p95"] < 50  # plumbing; accuracy: test_predictors
    # per sub-model: one GEMM kernel here (the family's own figures); collectives per kind
    assert lin["submodels"] == {"kernel:bf16": {"rows": 60, "p50": lin["p50"], "p95": lin["p95"],
                                                "mape": lin["mape"], "scope": "op"}}
    comm = report["families"]["comm"]["submodels"]
    assert len(comm) > 1 and sum(s["rows"] for s in comm.values()) == report["families"]["comm"]["rows"]
    text = runner.invoke(app, ["evaluate", "--bundle", str(out)]).output
    assert all(f"    {name} " in text for name in comm) and "kernel:bf16" not in text
    assert "predates per-sub-model errors" not in text
    # a bundle written before per-sub-model errors: family lines and a one-line hint
    import calibration.bundle as B
    old = B.load_bundle(out)
    errors = {f: {k: v for k, v in e.items() if k != "submodels"} for f, e in old.manifest["heldout_error"].items()}
    legacy = tmp_path / "legacy.joblib"
    B.save_bundle(legacy, old.predictors, {**old.manifest, "heldout_error": errors})
    res = runner.invoke(app, ["evaluate", "--bundle", str(legacy)])
    assert res.exit_code == 0 and "predates per-sub-model errors" in res.output and "all_reduce" not in res.output

    ops = tmp_path / "ops.csv"
    ops.write_text("family,m,n,k,dtype,op_name,message_bytes,num_gpus,link,timing_mode\n"
                   "linear,100,4096,4096,bf16,,,,,kernel\n"
                   "linear,100,4096,4096,bf16,,,,,launch\n"
                   "comm,,,,,all_reduce,1048576,8,nvlink,kernel\n"
                   "linear,100,4096,4096,fp8,,,,,kernel\n")
    priced = tmp_path / "priced.csv"
    res = runner.invoke(app, ["predict", "--bundle", str(out), "--input", str(ops), "--output", str(priced)])
    assert res.exit_code == 0, res.output
    got = pd.read_csv(priced)
    assert got.out_of_range.tolist() == [False, False, False, True]
    lines = priced.read_text().splitlines()     # the input's cells come back as written (100, not 100.0)
    assert [line.rsplit(",", 2)[0] for line in lines] == [
        "family,m,n,k,dtype,op_name,message_bytes,num_gpus,link,timing_mode",
        "linear,100,4096,4096,bf16,,,,,kernel", "linear,100,4096,4096,bf16,,,,,launch",
        "comm,,,,,all_reduce,1048576,8,nvlink,kernel", "linear,100,4096,4096,fp8,,,,,kernel"]
    assert got.predicted_latency_s[1] > got.predicted_latency_s[0] > 0
    assert np.isnan(got.predicted_latency_s[3])
    assert res.output == (f"wrote {priced} (4 rows, 1 out of range; 1 row has no sub-model in {out} (a dtype "
                          f"or kernel it has no measured rows for): predicted_latency_s empty, out_of_range true)\n")

    plain = tmp_path / "plain.csv"                # no timing_mode column: kernel, and the column says so
    plain.write_text("family,m,n,k,dtype\nlinear,100,4096,4096,bf16\n")
    res = runner.invoke(app, ["predict", "--bundle", str(out), "--input", str(plain)])
    assert res.exit_code == 0 and res.output.splitlines()[0] == "family,m,n,k,dtype,timing_mode,predicted_latency_s,out_of_range"
    assert res.output.splitlines()[1] == f"linear,100,4096,4096,bf16,kernel,{float(got.predicted_latency_s[0])!r},False"

    bad = {"missing.csv": None, "empty.csv": "",
           "family.csv": "family,m,n,k,dtype\nfoo,1,2,3,bf16\n",
           "mode.csv": "family,m,n,k,dtype,timing_mode\nlinear,1,4096,4096,bf16,fast\n",
           "number.csv": "family,m,n,k,dtype\nlinear,abc,4096,4096,bf16\n",
           "zero.csv": "family,m,n,k,dtype\nlinear,16,4096,4096,bf16\n\nlinear,0,4096,4096,bf16\n",
           "blank.csv": "family,m,n,k,dtype\nlinear,,4096,4096,bf16\n",
           "dtype.csv": "family,m,n,k,dtype\nlinear,16,4096,4096,int3\n",
           "nofamily.csv": "family,m,n,k,dtype\nlinear,16,4096,4096,bf16\n,16,4096,4096,bf16\n",
           "binary.csv": b"\x8c\x00\x01family",
           "ragged.csv": "family,m,n,k,dtype\nlinear,16,4096,4096,bf16\n\nlinear,16,4096,4096,bf16,kernel,extra\n"}
    want = {"missing.csv": "missing.csv does not exist", "empty.csv": "empty.csv is empty",
            "family.csv": "has no 'foo' predictor; has ['comm', 'linear']",
            "mode.csv": "linear rows in", "number.csv": "number.csv line 2: linear column m='abc'; valid: a whole number >= 1",
            "zero.csv": "zero.csv line 4: linear column m=0; valid: a whole number >= 1",
            "blank.csv": "blank.csv line 2: linear column 'm' is empty; give a number >= 1",
            "dtype.csv": "dtype.csv line 2: linear column dtype='int3'; valid: fp32, fp16, bf16,",
            "nofamily.csv": "nofamily.csv line 3: family is empty; valid: a bundle family, e.g. linear",
            "binary.csv": "binary.csv is not a UTF-8 text file (byte 0)",
            "ragged.csv": "ragged.csv line 4 has 7 fields, its header 5; a CSV of operator rows has one field "
                          "per header column"}
    for name, text in bad.items():
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        elif text is not None:
            path.write_text(text)
        res = runner.invoke(app, ["predict", "--bundle", str(out), "--input", str(path)])
        assert res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
        assert want[name] in res.output, res.output
    assert "timing_mode='fast'; valid: kernel, launch" in runner.invoke(
        app, ["predict", "--bundle", str(out), "--input", str(tmp_path / "mode.csv")]).output
    (tmp_path / "lead.csv").write_text("\n\nfamily,m,n,k,dtype\nlinear,16,4096,4096,bf16\n")   # blank lines first
    res = runner.invoke(app, ["predict", "--bundle", str(out), "--input", str(tmp_path / "lead.csv")])
    assert res.exit_code == 0 and res.output.splitlines()[1].startswith("linear,16,4096,4096,bf16,kernel,"), res.output


@needs_aic
def test_cli_refuses_corrupt_bundle(small_root, tmp_path):
    runner = CliRunner()
    out = tmp_path / "b.joblib"
    assert runner.invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                               "--family", "comm", "--out", str(out)]).exit_code == 0
    out.write_bytes(out.read_bytes()[:-10])
    res = runner.invoke(app, ["predict", "--bundle", str(out), "--input", str(out)])
    assert res.exit_code == 2
    assert "does not match its manifest" in res.output and res.output.count("\n") == 1
    res = runner.invoke(app, ["calibrate", "--gpu", "H100-SXM", "--out", str(out)])
    assert res.exit_code == 2 and "exactly one of --profiles" in res.output
    res = runner.invoke(app, ["calibrate", "--profiles", str(tmp_path / "none"), "--gpu", "H100-SXM", "--out", str(out)])
    assert res.exit_code == 2 and f"--profiles {tmp_path / 'none'} is not a directory" in res.output
    res = runner.invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H200", "--out", str(out)])
    assert res.exit_code == 2 and res.output.startswith("error: no profiles for gpu 'H200' under ")
    assert res.output.rstrip().endswith("; found gpus: H100-SXM") and res.output.count("\n") == 1
    res = runner.invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                              "--out", str(out), "--holdout-by", "shapes"])
    assert res.exit_code == 2 and "unknown --holdout-by 'shapes'; valid: rows, token-points" in res.output
    # a framework version no row has: refused before fitting (it used to write a bundle of the
    # collectives' library rows alone, labelled with the missing version)
    res = runner.invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                              "--out", str(tmp_path / "v.joblib"), "--framework-version", "9.9"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "no H100-SXM profile rows of framework version '9.9'" in res.output and "have 0.24.0" in res.output
    assert not (tmp_path / "v.joblib").exists()
    res = runner.invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                              "--out", str(out), "--split-seed", "-1"])
    assert res.exit_code == 2 and "split_seed=-1 must be a non-negative integer" in res.output


def test_rows_without_a_framework_version_calibrate_without_one(tmp_path):
    """Vidur's rows name their framework (sarathi-serve) and no version: the manifest and the
    printed header say none (they said "nan" before)."""
    from calibration.importers.rows import finish
    df = _gemm_rows(range(1, 65), [(2048, 2048), (4096, 4096)], lambda m, n, k: 5e-6 + 2 * m * n * k / 3e14)
    df = finish(df.assign(op_name="gemm", dtype="fp16"), "linear", gpu="H100-SXM", framework="sarathi-serve",
                source="vidur")
    write_profile(df, tmp_path / "p", "linear", "H100-SXM")
    out = tmp_path / "b.joblib"
    res = CliRunner().invoke(app, ["calibrate", "--profiles", str(tmp_path / "p"), "--gpu", "H100-SXM",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("H100-SXM sarathi-serve: held-out APE % (split 0.2 by rows, seed 0)")
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert (manifest["framework"], manifest["framework_version"]) == ("sarathi-serve", None)
    assert manifest["frameworks"] == [["sarathi-serve", None]]


@needs_aic
def test_calibrate_defaults_to_row_split(small_root, tmp_path):
    out = tmp_path / "rows.joblib"
    res = CliRunner().invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                                   "--family", "linear", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "split 0.2 by rows, seed 0" in res.output
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["split"] == {"holdout_fraction": 0.2, "split_seed": 0, "holdout_by": "rows",
                                 "scheme": "rows (see calibration.evaluate)"}
    assert manifest["heldout_error"]["linear"]["rows"] == 59   # round(0.2 x 296 rows)


@needs_aic
def test_bundle_of_other_features_version_is_refused(small_root, tmp_path):
    from calibration.bundle import load_bundle
    from calibration.features import FEATURES_VERSION
    out = tmp_path / "c.joblib"
    assert CliRunner().invoke(app, ["calibrate", "--profiles", str(small_root), "--gpu", "H100-SXM",
                                    "--family", "comm", "--out", str(out)]).exit_code == 0
    mpath = out.with_name(out.name + ".manifest.json")
    manifest = json.loads(mpath.read_text())
    assert manifest["features_version"] == FEATURES_VERSION
    assert load_bundle(out).manifest["features_version"] == FEATURES_VERSION
    manifest["features_version"] = FEATURES_VERSION - 1
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"fitted with features version {FEATURES_VERSION - 1}; this code "
                                         f"computes version {FEATURES_VERSION}: refit it"):
        load_bundle(out)


def test_auto_bundle_refits_a_stale_cache(tmp_path, monkeypatch):
    import calibration.evaluate
    import calibration.importers.aiconfigurator as aic
    from calibration.auto_bundle import bundle_path, ensure_bundle
    from calibration.features import FEATURES_VERSION

    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path))
    path = bundle_path("H100")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"old")
    manifest = path.with_name(path.name + ".manifest.json")
    fits = []
    monkeypatch.setattr(aic, "import_aiconfigurator_report", lambda *a, **k: type("R", (), {"rows": {"linear": 1}}))
    monkeypatch.setattr(calibration.evaluate, "calibrate", lambda root, gpu, out: fits.append((gpu, out)))
    for version, forests, refit in ((FEATURES_VERSION, "compiled", False), (FEATURES_VERSION - 1, "compiled", True),
                                    (None, None, True)):
        manifest.write_text(json.dumps({} if version is None else {"features_version": version, "forests": forests}))
        fits.clear()
        log = []
        assert ensure_bundle("H100", log=log.append) == path
        assert fits == ([("H100-SXM", path)] if refit else [])
        assert bool(log) == refit and (not refit or f"has features version {version}" in log[0])
    # a current bundle that stores sklearn forests (written before they were stored compiled)
    manifest.write_text(json.dumps({"features_version": FEATURES_VERSION}))
    fits.clear()
    log = []
    assert ensure_bundle("H100", log=log.append) == path and fits == [("H100-SXM", path)]
    assert "holds sklearn forests" in log[0]


@needs_aic
def test_auto_bundle_for_a_gpu_without_tables_says_what_to_do(tmp_path, monkeypatch):
    from calibration.auto_bundle import ensure_bundle
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path))
    log = []
    with pytest.raises(ValueError) as err:
        ensure_bundle("H800", data_root=AIC, log=log.append)
    assert str(err.value) == (
        "--predictor-bundle auto: AIConfigurator has no vLLM tables for H800 (it has them for A100-80GB, B200, B300, "
        "GB200, GB300, H100-SXM, H200, L40S, RTX-PRO-6000-Server); give --predictor-bundle PATH (a bundle "
        "calibrated from your own profiles) or leave the flag out for the roofline model")
    assert log == []     # nothing announced a fit that cannot happen


def test_held_out_error_per_submodel_marks_module_rows():
    from calibration.evaluate import _by_submodel
    err = np.array([1.0, 3.0, 10.0, 20.0, 5.0])
    modes = np.array(["kernel", "kernel", "kernel", "kernel", "launch"])
    keys = np.array(["mha:bf16", "mha:bf16", "mla:bf16", "mla:bf16", "mha:bf16"], dtype=object)
    got = _by_submodel(err, modes, keys, ("mla:bf16",))
    assert list(got) == ["kernel:mha:bf16", "kernel:mla:bf16", "launch:mha:bf16"]
    assert got["kernel:mha:bf16"] == {"rows": 2, "p50": 2.0, "p95": 2.9, "mape": 2.0, "scope": "op"}
    assert got["kernel:mla:bf16"]["scope"] == "module" and got["kernel:mla:bf16"]["mape"] == 15.0
    assert got["launch:mha:bf16"]["rows"] == 1
