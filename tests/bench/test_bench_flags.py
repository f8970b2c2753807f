"""The speed benchmarks refuse a bad flag with argparse's usage + one error line and exit 2
(a ValueError traceback from the simulator, or a run that measured nothing, before)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.bench.bench_scripts import ROOT

CASES = [("fidelity_query_cost", ["--gpu", "X100"], "fidelity_query_cost.py: error: unknown GPU 'X100'; valid: "),
         ("fidelity_query_cost", ["--runs", "0"], "fidelity_query_cost.py: error: --runs must be >= 1, got 0"),
         ("fidelity_query_cost", ["--model", "no/such"], "fidelity_query_cost.py: error: unknown model 'no/such'"),
         ("scale_1k", ["--num-prompts", "-5"], "scale_1k.py: error: --num-prompts must be >= 1, got -5"),
         ("scale_1k", ["--request-rate", "nan"], "scale_1k.py: error: --request-rate must be > 0, got nan"),
         ("sim_speed", ["--num-prompts", "0"], "sim_speed.py: error: --num-prompts must be >= 1, got 0")]


@pytest.mark.parametrize("script, argv, message", CASES)
def test_a_bad_flag_is_one_error_line(script: str, argv: list[str], message: str) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / f"{script}.py"), *argv], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    lines = out.stderr.splitlines()
    assert lines[0].startswith("usage: ") and lines[-1].startswith(message), out.stderr
