"""The H200 profiles committed under datasets/profiles/h200 (scripts/profile_h200.sh on one H200,
2026-12-01; torch 2.11.0+cu130): what they hold, and that they calibrate a bundle the
simulator prices Llama-3.1-8B with."""

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from calibration.bundle import load_bundle
from frontier.cli import app
from frontier.profile_schema import read_profiles

ROOT = Path(__file__).resolve().parents[2] / "datasets" / "profiles" / "h200"
TIMED = ("linear", "attention", "elementwise", "moe")
RUNNER = CliRunner()


def _pairs(df: pd.DataFrame) -> pd.DataFrame:
    """kernel / launch medians side by side, one row per measured point: the profiler writes a
    point's kernel row, then its launch row (two points may share every spec column, e.g. MoE
    routings with equal load statistics)."""
    modes = df["timing_mode"].to_numpy()
    assert (modes[0::2] == "kernel").all() and (modes[1::2] == "launch").all()
    spec = [c for c in df.columns if c not in ("timing_mode", "latency_s_median", "latency_s_p10", "latency_s_p90",
                                               "num_samples", "kernel_source")]
    kernel, launch = df.iloc[0::2].reset_index(drop=True), df.iloc[1::2].reset_index(drop=True)
    assert kernel[spec].equals(launch[spec])
    return pd.DataFrame({"kernel": kernel["latency_s_median"], "launch": launch["latency_s_median"]})


def test_every_operator_was_timed_both_ways_on_the_h200():
    counts = {f: len(read_profiles(ROOT, f, "H200")) for f in (*TIMED, "memory")}
    assert counts == {"linear": 960, "attention": 624, "elementwise": 400, "moe": 80, "memory": 12}
    for family in TIMED:
        df = read_profiles(ROOT, family, "H200")
        assert set(df["device_name"]) == {"NVIDIA H200"} and set(df["backend"]) == {"torch"}
        kernel = df[df["timing_mode"] == "kernel"]
        assert kernel["kernel_source"].str.fullmatch(r".* \[cuda_graph_replay_x\d+(?:\+cold_l2)?\]").all()
        assert df[df["timing_mode"] == "launch"]["kernel_source"].str.endswith("[eager_wall_sync]").all()
        wide = _pairs(df)
        assert len(wide) == len(df) // 2 and (wide > 0).all().all()


def test_launch_inclusive_is_at_least_kernel_only_but_for_three_long_ops_within_their_spread():
    """1,029 of 1,032 shapes; the three others run 1.5-13 ms, where the ~10-20 us launch
    overhead is below the run-to-run spread (kernel p10..p90 spans 1-10 %)."""
    below = []
    total = 0
    for family in TIMED:
        wide = _pairs(read_profiles(ROOT, family, "H200"))
        total += len(wide)
        below += [(family, k, l) for k, l in zip(wide["kernel"], wide["launch"]) if l < k]
    assert total == 1032 and len(below) == 3
    for family, k, l in below:
        assert k > 1.4e-3 and (k - l) / k < 0.07, (family, k, l)


def test_memory_rows_hold_every_term_the_kv_budget_needs():
    df = read_profiles(ROOT, "memory", "H200").set_index(["model", "tp"]).sort_index()
    llama = df.loc["Llama-3.1-8B"]
    assert list(llama.index) == [1, 2, 4, 8]
    assert (llama["weights_bytes"] // 2**20).tolist() == [15316, 7660, 3829, 1916]
    assert (llama["torch_peak_increase_bytes"] // 2**20).tolist() == [1280, 752, 496, 392]
    assert set(df["non_torch_bytes"] // 2**20) == {158, 162}          # a fresh process per row
    assert df.loc["Qwen3-30B-A3B", "cuda_graph_bytes"].isna().all()   # MoE forward: not captured
    assert (llama["cuda_graph_bytes"] // 2**20).tolist() == [234, 212, 180, 182]


def test_the_profiles_calibrate_a_bundle_that_prices_a_simulation(tmp_path):
    bundle = tmp_path / "h200-torch.joblib"
    res = RUNNER.invoke(app, ["calibrate", "--profiles", str(ROOT), "--gpu", "H200", "--out", str(bundle)])
    assert res.exit_code == 0, res.output
    loaded = load_bundle(bundle)
    assert set(loaded.predictors) == set(TIMED)
    assert loaded.manifest["framework_version"] == "2.11.0+cu130"
    assert {f: p.launch_overhead_source for f, p in loaded.predictors.items()} == {
        "linear": "measured (480 shapes timed both ways)", "attention": "measured (312 shapes timed both ways)",
        "elementwise": "measured (120 shapes timed both ways)", "moe": "measured (36 shapes timed both ways)"}
    memory = ["memory", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H200", "--predictor-bundle", str(bundle),
              "--json"]
    res = RUNNER.invoke(app, memory + ["--max-num-seqs", "256"])
    assert res.exit_code == 0, res.output
    sources = json.loads(res.output)["sources"]
    assert (sources["activation"], sources["non_torch"], sources["cuda_graph"]) == ("profiled",) * 3
    # 1,024 sequences: the sampler run's logits (1.7 GiB) outgrow the profiled 1.25 GiB forward
    res = RUNNER.invoke(app, memory + ["--max-num-seqs", "1024"])
    assert json.loads(res.output)["sources"]["activation"] == "estimated sampler run (above the profiled forward)"
    res = RUNNER.invoke(app, ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H200",
                              "--predictor-bundle", str(bundle), "--num-prompts", "20", "--request-rate", "inf",
                              "--random-input-len", "512", "--random-output-len", "32",
                              "--output-dir", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["completed"] == 20 and summary["cost_model"] == "calibrated (H200, torch 2.11.0+cu130)"
    assert summary["cost_queries_predicted"] > 0 and summary["cost_queries_out_of_range"] == 0
