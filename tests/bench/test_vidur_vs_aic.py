"""bench/vidur_vs_aic.py on the Vidur and AIConfigurator copies in ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"
bench = load_bench("vidur_vs_aic")


@pytest.mark.skipif(not (SHARED / "vidur" / "data").is_dir() or not (SHARED / "aiconfigurator").is_dir(),
                    reason=f"Vidur or AIC data absent under {SHARED}")
def test_same_shape_gemm_ratios_are_printed(capsys):
    assert bench.main(["--vidur", str(SHARED / "vidur"), "--aic", str(SHARED / "aiconfigurator")]) == 0
    out = capsys.readouterr().out.splitlines()
    # Vidur's fp16 GEMMs against AIC's bf16 ones on the shapes both hold: ~1 on A100, 1.13 on H100
    assert "  A100-80GB (vLLM 0.14.0)    702    1.01    0.90    1.18" in out
    assert "  H100-SXM (vLLM 0.24.0)     899    1.13    0.99    1.38" in out
    assert "    m 1-16                   145    1.04    0.94    1.13" in out
    # the roofline's elementwise kernels against Vidur's measured ones (AIC's tables have none)
    assert "  H100-SXM silu_and_mul            0.84    0.96    1.17    0.97" in out
    assert "  H100-SXM rms_norm                0.42    0.59    0.95    0.57" in out


def test_a_missing_vidur_folder_is_one_line(capsys):
    assert bench.main(["--vidur", "/nonexistent/vidur"]) == 2
    assert capsys.readouterr().err == ("error: --vidur /nonexistent/vidur is not a directory; give the Vidur "
                                       "dataset folder\n")
