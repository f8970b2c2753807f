"""bench/table_noise.py on the AIConfigurator copy in ../shared (H200 tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
AIC = ROOT.parent / "shared" / "datasets" / "aiconfigurator"
bench = load_bench("table_noise")


@pytest.mark.skipif(not AIC.is_dir(), reason=f"{AIC} not present")
def test_h200_table_floors_are_printed(capsys):
    assert bench.main(["--aic", str(AIC), "--gpus", "H200"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "H200:",
        "  GEMM, m 2-16 vs the shape's median        21735 rows   p50  0.99 %  p95  6.41 %",
        "  GEMM, best of 3 neighbour interpolations  86399 rows   p50  0.91 %  p95  5.24 %  (5.6 % of rows > 5 % off "
        "all three)",
        "  MoE, 3 routings of identical work           283 shapes  p50  1.26 %  p95  7.18 %"]


@pytest.mark.skipif(not AIC.is_dir(), reason=f"{AIC} not present")
def test_an_unknown_gpu_is_one_line(capsys):
    assert bench.main(["--aic", str(AIC), "--gpus", "X100"]) == 2
    assert capsys.readouterr().err.startswith("error: no AIC vllm data for GPUs ['X100']; valid: ")
