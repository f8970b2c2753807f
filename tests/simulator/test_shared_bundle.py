"""Simulations in one process share one loaded bundle per file and its predictors' memos, so a
sweep neither reloads bundles nor re-tabulates per run; the memos are bounded and change no
price."""

import os

import pandas as pd
import pytest

import calibration.bundle as B
from calibration.predictors import LinearPredictor
from frontier.gpu import get_gpu
from frontier.ops import GemmOp
from simulator.predictor_cost import make_cost_model

H100 = get_gpu("H100")
OPS = [GemmOp("x", m, 4096, 4096) for m in (1, 7, 130, 300, 1000)]   # 4 token blocks of 128


def _rows() -> pd.DataFrame:
    rows = []
    for m in (1, 4, 16, 64, 256, 1024, 4096):
        for n, k in ((4096, 4096), (6144, 4096)):
            rows.append({"op_name": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16", "framework": "vllm",
                         "timing_mode": "kernel", "latency_s_median": 5e-6 + 2 * m * n * k / 5e14})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def predictor():
    return LinearPredictor(n_estimators=2, max_samples=None).fit(_rows())


def _save(path, predictor) -> str:
    B.save_bundle(path, {"linear": predictor}, {"gpu": "H100-SXM", "framework": "vllm",
                                                "framework_version": "test", "families": {}})
    return str(path)


@pytest.fixture(autouse=True)
def empty_shared(monkeypatch):
    monkeypatch.setattr(B, "_SHARED", {})


def test_consecutive_cost_models_share_the_bundle_and_its_memos(tmp_path, predictor):
    path = _save(tmp_path / "a.joblib", predictor)
    first = make_cost_model(H100, "analytical", path)
    linear = first.bundle.predictors["linear"]
    linear.reset_cache()
    times = first.op_times_s(OPS, "kernel")
    assert (len(linear._tables), linear.memo_lookups, linear.memo_misses) == (4, 5, 4)
    for _ in range(3):
        again = make_cost_model(H100, "analytical", path)
        assert again.bundle is first.bundle and B.shared_bundles() == 1
        assert (len(linear._tables), linear.memo_lookups) == (4, 0)        # memos kept, counters zeroed
        assert again.op_times_s(OPS, "kernel") == times
        assert (len(linear._tables), linear.memo_lookups, linear.memo_misses) == (4, 5, 0)


def test_a_full_memo_is_cleared_and_prices_stay_the_same(tmp_path, predictor, monkeypatch):
    import calibration.predictors.base as base
    cost = make_cost_model(H100, "analytical", _save(tmp_path / "a.joblib", predictor))
    linear = cost.bundle.predictors["linear"]
    linear.reset_cache()
    want = cost.op_times_s(OPS, "kernel")
    monkeypatch.setattr(base, "MAX_MEMO_BLOCKS", 2)
    linear.reset_cache()
    got = [cost.op_times_s([op], "kernel")[0] for op in OPS]
    assert got == want and len(linear._tables) == 2                   # blocks 0, 1; cleared at block 2; then 2, 7
    assert (linear.memo_lookups, linear.memo_misses) == (5, 4)


def test_a_rewritten_file_is_loaded_again_and_replaces_its_entry(tmp_path, predictor):
    path = _save(tmp_path / "a.joblib", predictor)
    old = B.shared_bundle(path)
    _save(path, predictor)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))   # mtime moves even on coarse clocks
    new = B.shared_bundle(path)
    assert new is not old and B.shared_bundles() == 1
    assert B.shared_bundle(path) is new


def test_at_most_max_shared_bundles_stay_loaded(tmp_path, predictor):
    paths = [_save(tmp_path / f"b{i}.joblib", predictor) for i in range(B.MAX_SHARED_BUNDLES + 2)]
    loaded = [B.shared_bundle(p) for p in paths]
    assert B.shared_bundles() == B.MAX_SHARED_BUNDLES
    assert B.shared_bundle(paths[-1]) is loaded[-1]          # kept
    assert B.shared_bundle(paths[0]) is not loaded[0]        # least recently used: dropped, reloaded
    assert B.shared_bundles() == B.MAX_SHARED_BUNDLES


def test_a_missing_bundle_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        B.shared_bundle(tmp_path / "nope.joblib")
    assert B.shared_bundles() == 0
