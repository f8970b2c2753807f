"""bench/profile_vs_aic.py on the committed H200 profiles and the AIConfigurator copy in ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from tests.bench.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
AIC = ROOT.parent / "shared" / "datasets" / "aiconfigurator"
PROFILES = ROOT / "datasets" / "profiles" / "h200"
bench = load_bench("profile_vs_aic")


@pytest.mark.skipif(not AIC.is_dir(), reason=f"{AIC} not present")
def test_same_shapes_and_bundle_ratios_are_printed(tmp_path, capsys):
    bundle = tmp_path / "ours.joblib"   # any H200 bundle will do for part 2: ours, quick to fit
    res = CliRunner().invoke(app, ["calibrate", "--profiles", str(PROFILES), "--gpu", "H200", "--out", str(bundle)])
    assert res.exit_code == 0, res.output
    assert bench.main(["--profiles", str(PROFILES), "--aic", str(AIC), "--bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "our kernel-mode H200 rows: {'linear': 480, 'attention': 312, 'moe': 40, 'elementwise': 200}" in out
    # measured / measured on the 240 GEMM shapes both hold, and 24 single-request prefills
    assert "  linear (all)                         240    1.12    1.00    1.25" in out
    assert "  attention context, 1 request          24    1.25    1.08    1.40" in out
    assert "  moe moe_experts                       40" in out


def test_a_missing_profile_root_is_one_line(capsys):
    assert bench.main(["--profiles", "/nonexistent/profiles"]) == 2
    assert capsys.readouterr().err == ("error: --profiles /nonexistent/profiles is not a folder; give a profile "
                                       "root such as datasets/profiles/h200\n")
