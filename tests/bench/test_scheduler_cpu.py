"""bench/scheduler_cpu.py: vLLM 0.33's scheduler timed on this CPU (needs the oracle install)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from tests.bench.bench_scripts import load_bench

bench = load_bench("scheduler_cpu")
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM oracle not installed (scripts/install_oracle.sh)")


@needs_vllm
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_decode_steps_of_each_batch_size_are_timed(capsys):
    assert bench.main(["--batch-sizes", "1,4", "--steps", "3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["batch"] for r in got["rows"]] == [1, 4]
    for r in got["rows"]:
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in ("schedule_us", "update_us", "step_us"))
    assert bench.main(["--batch-sizes", "2", "--steps", "2", "--async-scheduling", "--prefix-caching"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("vLLM 0.33 AsyncScheduler on this CPU, decode steps (2 timed per size; prefix caching on), "
                        "median us per step:")
    assert len(lines) == 3 and lines[2].split()[0] == "2"
    assert lines[2].endswith("|                          |     897.6")     # EngineCpu: 813 + 2 x 42.3 us


def test_sarathi_serve_schedule_times_are_read_when_present():
    got = bench.vidur_schedule_ms()
    if not bench.VIDUR_CPU.is_file():
        assert got == {}
        return
    assert sorted(got) == [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128]
    assert got[8] == pytest.approx(0.15551686131708756) and got[128] == pytest.approx(2.0482786121223775)


def test_bad_flags_are_one_line(capsys):
    assert bench.main(["--batch-sizes", "0,x"]) == 2
    assert capsys.readouterr().err == "error: --batch-sizes '0,x': give comma-separated integers >= 1\n"
    assert bench.main(["--steps", "0"]) == 2
    assert capsys.readouterr().err == "error: --steps 0: give an integer >= 1\n"
