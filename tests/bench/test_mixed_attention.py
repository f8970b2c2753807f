"""bench/mixed_attention.py on the committed H200 profiles (torch backend, mixed batches included)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "datasets" / "profiles" / "h200"
bench = load_bench("mixed_attention")


def test_the_sum_rule_and_a_fit_with_mixed_rows_are_printed(capsys):
    assert bench.main(["--profiles", str(PROFILES)]) == 0
    assert capsys.readouterr().out.splitlines()[1:6] == [
        "  kernel mode: 192 uniform rows, 120 mixed",
        "    sum rule (uniform rows only), every mixed row     p50   5.7 %  p95  16.0 %  mean   6.6 %  "
        "median ratio 1.057",
        "    24 held out: sum rule                             p50   4.9 %  p95  15.5 %  mean   6.6 %",
        "    24 held out: fitted with the other mixed rows     p50   2.4 %  p95   6.2 %  mean   3.3 %",
        "    24 held out: token-count baseline, same rows      p50  39.7 %  p95  67.5 %  mean  36.6 %"]


def test_json_holds_both_modes_and_another_split_draws_other_rows(capsys):
    assert bench.main(["--profiles", str(PROFILES), "--json", "--split-seed", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert sorted(got) == ["kernel", "launch"]
    assert round(got["kernel"]["sum_rule"]["p95"], 1) == 16.0           # every mixed row: no split involved
    assert round(got["launch"]["sum_rule"]["median_ratio"], 3) == 1.121
    assert got["kernel"]["held_out"]["rows"] == 24
    assert round(got["kernel"]["held_out"]["sum_rule"]["p95"], 1) != 15.5   # other rows than seed 0's


def test_bad_input_is_one_line(tmp_path, capsys):
    assert bench.main(["--profiles", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (f"error: --profiles {tmp_path / 'none'} is not a directory (a profile root, "
                                       "as `frontier profile` writes it)\n")
    assert bench.main(["--profiles", str(PROFILES), "--gpu", "H100"]) == 2
    assert capsys.readouterr().err == (f"error: no H100 attention profiles under {PROFILES} time both uniform and "
                                       "mixed batches (op_name 'mixed')\n")
    assert bench.main(["--profiles", str(PROFILES), "--holdout-fraction", "1.5"]) == 2
    assert capsys.readouterr().err == "error: holdout_fraction=1.5 must be in (0, 1)\n"
