"""Calibrated costs inside a simulation: bundle predictors price GEMMs, the rest falls back."""

import math
from pathlib import Path

import pandas as pd
import pytest

from calibration.bundle import load_bundle, save_bundle
from calibration.predictors import LinearPredictor
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def _gemm_rows() -> pd.DataFrame:
    """Synthetic bf16 GEMM timings on a small grid: 2x a 700 TFLOP/s / 3 TB/s roofline + 5 us."""
    rows = []
    for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096)):
            flops, bytes_ = 2 * m * n * k, 2 * (m * k + n * k + m * n)
            t = 2 * max(flops / 700e12, bytes_ / 3e12) + 5e-6
            rows.append({"op_name": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16",
                         "framework": "vllm", "timing_mode": "kernel", "latency_s_median": t})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    pred = LinearPredictor(n_estimators=4).fit(_gemm_rows())
    path = tmp_path_factory.mktemp("b") / "H100.joblib"
    save_bundle(path, {"linear": pred}, {"gpu": "H100-SXM", "framework": "vllm",
                                         "framework_version": "test", "families": {}})
    return str(path)


def run(bundle: str | None, gpu: str = "H100"):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu=gpu, max_model_len=4096),
        workload=WorkloadSpec(num_prompts=20, random_input_len=512, random_output_len=16),
        predictor_bundle=bundle))


def test_bundle_prices_gemms_and_the_rest_falls_back_to_roofline(bundle_path):
    calibrated, roofline = run(bundle_path), run(None)
    s = calibrated.summary
    assert s["cost_model"] == "calibrated (H100-SXM, vllm test)"
    assert s["cost_queries_predicted"] > 0 and s["cost_queries_roofline"] > 0
    assert roofline.summary["cost_model"] == "roofline"
    # GEMMs are about twice the roofline in the synthetic data: the run gets slower
    assert s["mean_tpot_ms"] > 1.3 * roofline.summary["mean_tpot_ms"]
    assert s["completed"] == roofline.summary["completed"] == 20


def test_fp16_rows_price_the_simulators_bf16_ops_as_bf16_rows_would(bundle_path, tmp_path):
    """A bundle of fp16 rows only (Vidur's profiles are fp16): the simulator's bf16 GEMMs take the
    fp16 sub-model and its fitted roofline; the same rows labelled bf16 give the same run."""
    from calibration.predictors.base import float16_twin
    assert (float16_twin("bf16"), float16_twin("mha:fp16"), float16_twin("rms_norm:bf16")) == (
        "fp16", "mha:bf16", "rms_norm:fp16")
    assert float16_twin("fp8") is None and float16_twin("mha:fp8") is None
    pred = LinearPredictor(n_estimators=4).fit(_gemm_rows().assign(dtype="fp16", framework="sarathi-serve"))
    assert list(pred.roofline) == ["fp16"] and pred._query_roofline["bf16"] == pred.roofline["fp16"]
    path = tmp_path / "H100.joblib"
    save_bundle(path, {"linear": pred}, {"gpu": "H100-SXM", "framework": "sarathi-serve",
                                         "framework_version": None, "families": {}})
    fp16, bf16 = run(str(path)).summary, run(bundle_path).summary
    assert fp16["cost_model"] == "calibrated (H100-SXM, sarathi-serve; bf16 ops priced from fp16 rows: linear)"
    assert fp16["cost_queries_predicted"] == bf16["cost_queries_predicted"] > 0
    assert (fp16["mean_ttft_ms"], fp16["mean_tpot_ms"]) == (bf16["mean_ttft_ms"], bf16["mean_tpot_ms"])


VIDUR = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "vidur"


@pytest.mark.skipif(not (VIDUR / "data").is_dir(), reason=f"Vidur data absent at {VIDUR}")
def test_a_bundle_of_vidurs_profiles_prices_gemms_and_its_elementwise_kernels(tmp_path):
    from calibration.evaluate import calibrate
    from calibration.importers.vidur import import_vidur
    from frontier.ops import ElementwiseOp
    import_vidur(VIDUR, tmp_path / "p")
    path = tmp_path / "vidur.joblib"
    assert calibrate(tmp_path / "p", "H100-SXM", path, families=["linear", "elementwise"])["framework_version"] is None
    s = run_simulation(SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-2-7b-hf", gpu="H100", max_model_len=4096),
        workload=WorkloadSpec(num_prompts=20, random_input_len=512, random_output_len=16),
        predictor_bundle=str(path))).summary
    assert s["cost_model"] == ("calibrated (H100-SXM, sarathi-serve; bf16 ops priced from fp16 rows: linear, "
                               "elementwise)")
    assert (s["cost_queries_predicted"], s["cost_queries_roofline"]) == (31, 32)   # 0 predicted before
    # the kernels Vidur times: the plain norm, RoPE, SiLU-and-mul; not vLLM's fused add + norm
    ew = load_bundle(path).predictors["elementwise"]
    h, width = 4096, (32 + 32) * 128
    priced = {op.name: ew.price_op(op, "kernel")[0] for op in (
        ElementwiseOp("final_norm", 64, h, 2 * h * 2), ElementwiseOp("rotary", 64, h, 2 * width * 2),
        ElementwiseOp("mlp_act", 64, 11008, 3 * 11008 * 2), ElementwiseOp("input_norm", 64, h, 4 * h * 2))}
    assert priced["final_norm"] > 0 and priced["rotary"] > 0 and priced["mlp_act"] > 0
    assert math.isnan(priced["input_norm"])


def _attention_rows() -> pd.DataFrame:
    """Uniform decode and prefill batches of Llama-3.1-8B's heads (tp1), a smooth synthetic law."""
    base = dict(op_name="generation", num_heads=32, num_kv_heads=8, head_dim=128, window_size=0, kv_dtype="bf16",
                is_mla=False, prefill_ctx_max=0, framework="vllm", timing_mode="kernel")
    zero = {f"{p}_{s}": 0 for p in ("prefill_len", "decode_ctx") for s in ("min", "max", "mean", "p50", "p90")}
    rows = [{**base, **zero, "batch_size": b, "num_prefill": 0, "num_decode": b, "prefill_tokens": 0,
             **{f"decode_ctx_{s}": c for s in ("min", "max", "mean", "p50", "p90")},
             "latency_s_median": 6e-6 + b * c * 4096 / 2.5e12} for b in (1, 4, 16, 64) for c in (128, 512, 2048)]
    rows += [{**base, **zero, "op_name": "context", "batch_size": 1, "num_prefill": 1, "num_decode": 0,
              "prefill_tokens": n, **{f"prefill_len_{s}": n for s in ("min", "max", "mean", "p50", "p90")},
              "latency_s_median": 8e-6 + n * n * 8192 / 6e14} for n in (64, 256, 1024, 4096)]
    return pd.DataFrame(rows)


def test_a_warm_memo_from_earlier_simulations_changes_no_result(tmp_path):
    from calibration.bundle import shared_bundle
    from calibration.predictors import AttentionPredictor
    path = tmp_path / "H100.joblib"
    save_bundle(path, {"linear": LinearPredictor(n_estimators=2).fit(_gemm_rows()),
                       "attention": AttentionPredictor(n_estimators=2).fit(_attention_rows())},
                {"gpu": "H100-SXM", "framework": "vllm", "framework_version": "test", "families": {}})
    attention = shared_bundle(str(path)).predictors["attention"]
    attention.reset_cache()
    cold = run(str(path)).summary
    cells = attention._num_cells
    warm = run(str(path)).summary                      # every cell already in the memo
    assert cells > 0 and attention.memo_lookups > 0 and attention.memo_misses == 0
    attention.reset_cache()
    again = run(str(path)).summary
    wall = {k for k in cold if "wall" in k}
    assert {k: v for k, v in warm.items() if k not in wall} == {k: v for k, v in cold.items() if k not in wall}
    assert {k: v for k, v in again.items() if k not in wall} == {k: v for k, v in cold.items() if k not in wall}


def test_bundle_of_another_gpu_is_refused(bundle_path):
    with pytest.raises(ValueError, match="fitted on H100-SXM, not H200"):
        run(bundle_path, gpu="H200")


def test_cli_auto_uses_the_cached_bundle_and_refuses_a_missing_file(bundle_path, tmp_path, monkeypatch):
    import shutil

    from typer.testing import CliRunner

    from calibration.auto_bundle import bundle_path as auto_path
    from calibration.bundle import manifest_path
    from frontier.cli import app
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path))
    target = auto_path("H100")
    assert target == tmp_path / "bundles" / "H100-SXM-vllm.joblib"
    target.parent.mkdir(parents=True)
    shutil.copy(bundle_path, target)
    shutil.copy(manifest_path(bundle_path), manifest_path(target))
    argv = ["simulate", "--gpu", "H100", "--max-model-len", "4096", "--num-prompts", "4",
            "--random-input-len", "64", "--random-output-len", "4"]
    res = CliRunner().invoke(app, argv + ["--predictor-bundle", "auto"])
    assert res.exit_code == 0, res.output
    assert "cost model: calibrated (H100-SXM, vllm test)" in res.output
    assert res.output.splitlines()[1] == ("calibrated costs: 9 of 26 operator queries priced by the bundle (0 outside "
                                         "its measured range); 17 by the roofline or, for collectives, the comm model")
    res = CliRunner().invoke(app, argv + ["--predictor-bundle", str(tmp_path / "nope.joblib")])
    assert res.exit_code == 2 and "is not a file" in res.output
