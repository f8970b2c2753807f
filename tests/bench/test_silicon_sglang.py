"""bench/silicon_sglang.py: the measured SGLang rows mapped to --engine sglang runs, and one run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.bench.bench_scripts import ROOT, load_bench

pytestmark = pytest.mark.skipif(not (ROOT.parent / "shared" / "datasets" / "aiconfigurator").is_dir(),
                                reason="needs ../shared/datasets/aiconfigurator")


def test_aic_rows_take_aics_sglang_benchmark_launch():
    bench = load_bench("silicon_sglang")
    rows = [r for r in bench.load_sglang_rows(("h100_sxm",)) if r["model_path"] == "Qwen/Qwen3-32B"]
    assert len(rows) == 84
    dep, flags = bench.map_sglang_row(rows[0])
    assert dep.harness == "aic" and dep.bench_prompts == 20 * dep.concurrency
    assert flags == dict(max_running_requests=dep.batch_size, max_prefill_tokens=dep.isl + 1500,
                         enable_mixed_chunk=True, cuda_graph_bs=tuple(range(1, dep.batch_size + 1)))


def test_expert_parallel_rows_map_to_sglangs_ep_size():
    """A row's moe_tp x moe_ep over its tp_size GPUs is SGLang's --ep-size (moe_tp = tp / ep), which
    silicon_e2e's vLLM mapping skips as a mixed grid."""
    bench = load_bench("silicon_sglang")
    rows = [r for r in bench.load_sglang_rows(("b200_sxm",)) if r["model_path"] == "deepseek-ai/DeepSeek-R1"
            and r["precision"] == "fp8" and r["moe_ep_size"] not in ("", "1", "1.0")]
    assert rows and all(float(r["moe_tp_size"]) * float(r["moe_ep_size"]) == float(r["tp_size"]) for r in rows)
    dep, flags = bench.map_sglang_row(rows[0])
    assert (dep.tp, dep.enable_expert_parallel, flags["ep_size"]) == (64, False, 8)
    assert isinstance(bench.E.map_row(rows[0]), bench.E.Skip)
    same = dict(rows[0], moe_tp_size="", moe_ep_size="")
    assert "ep_size" not in bench.map_sglang_row(same)[1]


def test_one_row_runs_and_reports(capsys):
    bench = load_bench("silicon_sglang")
    assert bench.main(["--systems", "h100_sxm", "--models", "Qwen3-32B", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-32B@h100_sxm tp" in out and "\nall " in out and "wall " in out


def test_a_bad_system_is_one_error_line():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "silicon_sglang.py"), "--systems", "a100"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].endswith(
        "--systems ['a100'] not in ['b200_sxm', 'b300_sxm', 'gb200', 'h100_sxm', 'h200_sxm']")
