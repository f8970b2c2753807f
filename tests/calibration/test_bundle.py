"""Bundles: round trip, and refusal of corrupt, foreign or manifest-less files before unpickling."""

import json
import pickle

import numpy as np
import pandas as pd
import pytest

from calibration.bundle import load_bundle, manifest_path, read_manifest, rows_sha256, save_bundle, source_label
from calibration.predictors import CommPredictor
from frontier.ops import CommOp
from frontier.profile_schema import SCHEMA_VERSION


def _comm_rows() -> pd.DataFrame:
    sizes = 2.0 ** np.arange(10, 28)
    rows = []
    for op, scale in (("all_reduce", 1.0), ("all_gather", 0.6)):
        for g in (2, 4, 8):
            for b in sizes:
                rows.append({"op_name": op, "message_bytes": int(b), "num_gpus": g, "link": "nvlink",
                             "framework": "nccl", "timing_mode": "kernel",
                             "latency_s_median": scale * (8e-6 + b * 2 * (g - 1) / g / 150e9)})
    return pd.DataFrame(rows)


@pytest.fixture()
def bundle(tmp_path):
    pred = CommPredictor(n_estimators=4).fit(_comm_rows())
    path = tmp_path / "H100.joblib"
    manifest = save_bundle(path, {"comm": pred}, {"gpu": "H100", "framework": "vllm", "framework_version": "0.24.0",
                                                  "families": {"comm": pred.describe()}})
    return path, pred, manifest


def test_round_trip_prices_identically(bundle):
    path, pred, manifest = bundle
    ops = [CommOp("all_reduce", 1 << 20, 8), CommOp("all_gather", 1 << 16, 4)]
    loaded = load_bundle(path)
    assert np.array_equal(loaded.predictor("comm").predict_s(ops), pred.predict_s(ops))
    m = loaded.manifest
    assert m == manifest == json.loads(manifest_path(path).read_text())
    assert m["schema_version"] == SCHEMA_VERSION and m["bundle_format"] == 1
    assert set(m["libraries"]) == {"sklearn", "numpy", "joblib", "python"}
    assert m["families"]["comm"]["features"][0] == "lg_bytes"
    with pytest.raises(ValueError, match="no 'linear' predictor"):
        loaded.predictor("linear")


def test_corrupt_payload_is_refused(bundle):
    path = bundle[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match its manifest") as exc:
        load_bundle(path)
    assert "\n" not in str(exc.value)


def test_foreign_file_is_refused(bundle, tmp_path):
    path = bundle[0]
    foreign = tmp_path / "evil.joblib"
    foreign.write_bytes(pickle.dumps({"predictors": {}}))
    with pytest.raises(ValueError, match="has no manifest"):
        load_bundle(foreign)
    manifest_path(foreign).write_text(manifest_path(path).read_text())   # someone else's manifest
    with pytest.raises(ValueError, match="corrupt or foreign"):
        load_bundle(foreign)
    manifest_path(foreign).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        load_bundle(foreign)


def test_other_schema_version_is_refused(bundle):
    path = bundle[0]
    m = json.loads(manifest_path(path).read_text())
    m["schema_version"] = SCHEMA_VERSION + 1
    manifest_path(path).write_text(json.dumps(m))
    with pytest.raises(ValueError, match="schema_version"):
        read_manifest(path)


def test_hash_checked_payload_that_is_not_predictors_is_refused(tmp_path):
    path = tmp_path / "odd.joblib"
    save_bundle(path, {"comm": object()}, {"gpu": "H100"})
    with pytest.raises(ValueError, match="does not hold frontier predictors"):
        load_bundle(path)


def test_rows_sha256_ignores_row_order():
    df = _comm_rows()
    assert rows_sha256(df) == rows_sha256(df.iloc[::-1])
    assert rows_sha256(df) != rows_sha256(df.iloc[1:])


def test_forests_are_stored_compiled_and_load_without_sklearn(bundle):
    """The payload holds CompiledForests (the same predictions as the fitted sklearn forests),
    and a fresh process loads and queries the bundle without importing sklearn or scipy."""
    import subprocess
    import sys

    from calibration.predictors.tree_eval import CompiledForest
    path, pred, manifest = bundle
    assert manifest["forests"] == "compiled"
    loaded = load_bundle(path).predictor("comm")
    assert all(isinstance(m, CompiledForest) for m in loaded.models.values())
    assert not any(isinstance(m, CompiledForest) for m in pred.models.values())      # the fitted object is kept
    X = np.array([[20.0, 8.0, 0.0, 0.0, 20.8], [15.0, 4.0, 1.0, 0.0, 14.6]])
    for key, model in pred.models.items():
        assert np.abs(loaded.models[key].predict(X) - model.predict(X)).max() <= 1e-12
    code = ("import sys; from calibration.bundle import load_bundle; from frontier.ops import CommOp; "
            f"p = load_bundle({str(path)!r}).predictor('comm'); "
            "print(p.predict_s([CommOp('all_reduce', 1 << 20, 8)])[0]); "
            "print('sklearn' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert float(out[0]) == pred.predict_s([CommOp("all_reduce", 1 << 20, 8)])[0]
    assert out[1:] == ["False", "False"]


def test_source_label_names_every_framework_the_rows_hold():
    assert source_label({"frameworks": [["vllm", "0.24.0"]]}) == "vllm 0.24.0"
    assert source_label({"frameworks": [["sarathi-serve", None], ["vllm", "0.24.0"]]}) == "sarathi-serve + vllm 0.24.0"
    # manifests written before the "frameworks" key
    assert source_label({"framework": "vllm", "framework_version": "0.24.0"}) == "vllm 0.24.0"
    assert source_label({"framework": "sarathi-serve", "framework_version": None}) == "sarathi-serve"
