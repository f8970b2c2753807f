"""bench/moe_a2a_tables.py on the AIConfigurator copy in ../shared (H200's DeepEP tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
AIC = ROOT.parent / "shared" / "datasets" / "aiconfigurator"
bench = load_bench("moe_a2a_tables")


@pytest.mark.skipif(not AIC.is_dir(), reason=f"{AIC} not present")
def test_h200_deepep_figures_are_printed(capsys):
    assert bench.main(["--aic", str(AIC), "--gpus", "H200,A100-80GB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "H200:" and lines[-1] == "A100-80GB: no DeepEP table"
    assert lines[1] == ("  deepep_ht combine  EP 8   78 rows  analytical / measured 0.53 (p10 0.13, p90 0.82)  "
                        "leave one shape out p50   5.8 %  p95  45.4 %")
    assert lines[-2] == ("  deepep_ll dispatch across nodes, x EP 8 (SGLang's tables, median over EP 8's token counts): "
                         "EP 16 1.74x, EP 32 2.27x, EP 64 2.58x")
    assert len(lines) == 10


@pytest.mark.skipif(not AIC.is_dir(), reason=f"{AIC} not present")
def test_an_unknown_gpu_is_one_line(capsys):
    assert bench.main(["--aic", str(AIC), "--gpus", "X100"]) == 2
    assert capsys.readouterr().err.startswith("error: no AIC vllm data for GPUs ['X100']; valid: ")
