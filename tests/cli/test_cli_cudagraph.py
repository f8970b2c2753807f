"""`frontier simulate` / `frontier memory` with --cudagraph-capture-sizes, --max-cudagraph-capture-size
and --compilation-config's CUDA-graph keys."""

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from frontier.cli import app

runner = CliRunner()
SIM = ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--max-model-len", "4096",
       "--num-prompts", "40", "--random-input-len", "64", "--random-output-len", "8"]
MEM = ["memory", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--json"]
PAPER = (1, 2, 4, 8, 16, 32, 64)


def _steps(tmp_path, *flags):
    res = runner.invoke(app, SIM + ["--output-dir", str(tmp_path)] + list(flags))
    assert res.exit_code == 0, res.output
    t = pq.read_table(tmp_path / "steps.parquet").to_pydict()
    return list(zip(t["num_reqs"], t["num_tokens"], t["padded_tokens"], t["cudagraph_mode"]))


def test_simulate_runs_on_the_given_capture_sizes(tmp_path):
    steps = _steps(tmp_path, "--cudagraph-capture-sizes", "1,2,4,8,16,32,64")
    decode = [(n, p, m) for r, n, p, m in steps if 0 < n == r]
    assert (40, 64, "FULL") in decode                       # 40 decode requests padded to the 64 graph
    assert all(p == min(b for b in PAPER if b >= n) and m == "FULL" for n, p, m in decode)
    assert all(m == "NONE" and p == n for r, n, p, m in steps if n > 64)    # the prefills: eager
    default = _steps(tmp_path / "d")
    assert (40, 40, 40, "FULL") in default                  # vLLM's default list has 40


def test_space_separated_list_and_compilation_config_mode(tmp_path):
    steps = _steps(tmp_path, "--cudagraph-capture-sizes", "1 2 4 8 16 32 64",
                   "-cc", '{"cudagraph_mode": "PIECEWISE"}')
    assert {(n, p, m) for r, n, p, m in steps if 0 < n == r} >= {(40, 64, "PIECEWISE")}
    assert {m for *_, m in steps} <= {"PIECEWISE", "NONE"}
    steps = _steps(tmp_path / "cc", "--compilation-config",
                   '{"cudagraph_capture_sizes": [8, 48], "cudagraph_mode": "FULL_DECODE_ONLY"}')
    assert (40, 40, 48, "FULL") in steps and all(m in ("FULL", "NONE") for *_, m in steps)


def test_scenario_file_takes_a_list(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("cudagraph-capture-sizes: [1, 2, 4, 8, 16, 32, 64]\nmax_cudagraph_capture_size: 64\n")
    steps = _steps(tmp_path, "--config", str(cfg))
    assert (40, 40, 64, "FULL") in steps


def test_memory_counts_the_graphs_of_the_flags():
    def graph_gib(*flags):
        res = runner.invoke(app, MEM + list(flags))
        assert res.exit_code == 0, res.output
        return json.loads(res.output)["cuda_graph_gib"]
    default = graph_gib()
    paper = graph_gib("--cudagraph-capture-sizes", "1,2,4,8,16,32,64")
    assert 0 < paper < default
    graph = 2 / 1024                     # GiB per graph after the first: 64 KiB x 32 layers
    # max 64: 1, 2, 4, 8, 16, 24, ..., 64 = 11 sizes vs the paper's 7, each PIECEWISE + FULL
    assert graph_gib("--max-cudagraph-capture-size", "64") - paper == pytest.approx(2 * 4 * graph, abs=1e-12)
    assert graph_gib("-cc", '{"cudagraph_mode": "NONE"}') == 0 == graph_gib("--enforce-eager")
    # default: 51 PIECEWISE + 51 FULL graphs; PIECEWISE drops the 51 FULL ones (50 after the first)
    assert default - graph_gib("-cc", '{"cudagraph_mode": "PIECEWISE"}') == pytest.approx(50 * graph, abs=1e-12)


@pytest.mark.parametrize("flags,needle", [
    (["--cudagraph-capture-sizes", "0,4"], "--cudagraph-capture-sizes must be positive integers, got 0 in [0, 4]"),
    (["--cudagraph-capture-sizes", "1,x"], "'x' is not an integer"),
    (["--cudagraph-capture-sizes", ""], "at least one element"),
    (["--max-cudagraph-capture-size", "0"], "--max-cudagraph-capture-size must be a positive integer, got 0"),
    (["--cudagraph-capture-sizes", "1,2,4", "--max-cudagraph-capture-size", "8"],
     "customized max_cudagraph_capture_size(=8) should be consistent with the max value of "
     "cudagraph_capture_sizes(=4)"),
    (["-cc", '{"mode": 3}'], "--compilation-config key 'mode' is not simulated"),
    (["-cc", "{cudagraph_mode: FULL}"], "is not valid JSON"),
    (["-cc", '{"cudagraph_mode": "HALF"}'], "cudagraph_mode 'HALF' is not one of NONE, PIECEWISE"),
    (["--max-cudagraph-capture-size", "8", "-cc", '{"max_cudagraph_capture_size": 8}'],
     "max_cudagraph_capture_size and compilation_config.max_cudagraph_capture_size are mutually exclusive"),
])
@pytest.mark.parametrize("command", [SIM, MEM])
def test_bad_values_get_one_line_errors(command, flags, needle):
    res = runner.invoke(app, command + flags)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.output


def test_optimization_level_sets_the_default_mode(tmp_path):
    eager = _steps(tmp_path / "o0", "-O0")
    assert {m for *_, m in eager} == {"NONE"} and all(p == n for r, n, p, m in eager)
    piecewise = _steps(tmp_path / "o1", "-O", "1")
    assert (40, 40, 40, "PIECEWISE") in piecewise and {m for *_, m in piecewise} <= {"PIECEWISE", "NONE"}
    assert _steps(tmp_path / "o3", "--optimization-level", "3") == _steps(tmp_path / "o2")
    user_mode = _steps(tmp_path / "cc", "-O0", "-cc", '{"cudagraph_mode": "FULL_DECODE_ONLY"}')
    assert (40, 40, 40, "FULL") in user_mode                 # a user-set mode wins over the level's


def test_optimization_level_out_of_range_is_one_line():
    res = runner.invoke(app, SIM + ["-O5"])
    assert res.exit_code != 0
    assert res.output.strip().splitlines()[-1] == "error: --optimization-level (-O) 5 is not one of 0, 1, 2, 3"
    res = runner.invoke(app, MEM + ["-O0"])
    assert res.exit_code == 0 and json.loads(res.output)["cuda_graph_gib"] == 0
