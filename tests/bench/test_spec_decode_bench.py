"""bench/spec_decode.py: the simulated speculative-decoding speedup beside the scalar formula's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.bench.bench_scripts import ROOT, load_bench


def test_it_prints_one_row_per_rate_and_batch_and_the_formula_checks_out(capsys):
    bench = load_bench("spec_decode")
    assert bench.main(["--rates", "0,1", "--batches", "1,4", "--output-len", "64", "--input-len", "128"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("0.00", "1"), ("0.00", "4"), ("1.00", "1"), ("1.00", "4")]
    # nothing accepted: every verify commits one token, so drafting only costs; all accepted: 1 + k
    assert [float(r[4]) for r in rows] == [1.0, 1.0, 4.0, 4.0]
    assert all(float(r[5][:-1]) < 1.0 and float(r[6][:-1]) < 1.0 for r in rows[:2])
    assert all(float(r[5][:-1]) > 2.0 for r in rows[2:])


@pytest.mark.parametrize("argv, message", [(["--batches", "0"], "--batches '0': give comma-separated integers"),
                                           (["--rates", "x"], "give comma-separated numbers"),
                                           (["--method", "ngram"], "method 'ngram' is not simulated"),
                                           (["--k", "0"], "--k must be >= 1, got 0")])
def test_a_bad_flag_is_one_error_line(argv, message):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "spec_decode.py"), *argv], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert message in out.stderr.splitlines()[-1]
