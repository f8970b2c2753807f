"""`frontier profile`: the workflow end to end on CPU, one-line errors, torch-free CLI import."""

import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from frontier.cli import app
from frontier.profile_schema import read_profiles

runner = CliRunner()


def profile(*args):
    return runner.invoke(app, ["profile", *args])


def test_help_explains_the_workflow():
    res = profile("--help")
    assert res.exit_code == 0
    for text in ("--dry-run", "rerun", "kernel", "launch", "--tensor-parallel-size", "--grid"):
        assert text in res.output


def test_dry_run_then_run_then_rerun(dense_config, tmp_path):
    out = tmp_path / "profiles"
    grid = tmp_path / "grid.yaml"
    grid.write_text("linear_tokens: [1, 4]\nattention_decode_ctx: [16]\nchunk_size: 8\n")
    base = ["--model", dense_config, "-tp", "1,2", "--families", "linear,attention,memory", "--out", str(out),
            "--grid", str(grid), "--warmup-ms", "0", "--budget-ms", "1"]
    res = profile(*base, "--dry-run")
    assert res.exit_code == 0, res.output
    assert "2 layout(s) x 3 families -> " in res.output and "estimated" in res.output and not out.exists()
    torch.set_num_threads(2)
    res = profile(*base)
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 1   # CPU sweeps time on one thread
    linear = read_profiles(out, "linear", "cpu")
    assert len(linear) == 2 * 5 * 2 * 2  # layouts x GEMMs x tokens x modes
    assert set(linear["timing_mode"]) == {"kernel", "launch"} and set(linear["source"]) == {"frontier-profiler"}
    assert len(read_profiles(out, "memory", "cpu")) == 2
    res = profile(*base)
    assert res.exit_code == 0 and "0 points left" in res.output and "wrote 0 rows" in res.output


@pytest.mark.parametrize("args, message", [
    (["--families", "linear,norms"], "error: unknown family 'norms'; valid: linear, attention, moe, elementwise, memory"),
    (["-tp", "3"], "error: tp=3 must divide num_attention_heads=4 of tiny-llama"),
    (["-tp", "1,x"], "error: --tensor-parallel-size='1,x' must be comma-separated positive integers"),
    (["-ep", "2"], "error: --expert-parallel-size 2 needs an MoE model; tiny-llama is dense"),
    (["--device", "tpu"], "error: --device='tpu'; valid: cpu, cuda, cuda:N"),
    (["--backend", "flashinfer"], "error: backend 'flashinfer' needs --device cuda"),
    (["--backend", "vllm"], "error: backend 'vllm' needs --device cuda; on cpu use torch"),
    (["--gpu", "H200"], "error: --gpu H200 with --device cpu"),
])
def test_bad_input_is_one_line_error(dense_config, tmp_path, args, message):
    res = profile("--model", dense_config, "--out", str(tmp_path / "o"), "--dry-run", *args)
    assert res.exit_code == 2
    assert res.output.strip().startswith(message) and len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_refused(dense_config, tmp_path):
    res = profile("--model", dense_config, "--out", str(tmp_path), "--device", "cuda")
    assert res.exit_code == 2 and "error: --device cuda but no CUDA GPU is visible" in res.output


def test_out_folder_of_another_schema_version_is_refused(dense_config, tmp_path):
    (tmp_path / "_schema_version").write_text("999\n")
    res = profile("--model", dense_config, "--out", str(tmp_path), "--families", "memory")
    assert res.exit_code == 2
    assert "holds schema_version 999; this code writes 1 (use another folder)" in res.output


def test_importing_the_cli_does_not_import_torch():
    code = "import sys, frontier.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_sigkilled_sweep_rerun_completes_without_loss_or_duplicates(dense_config, tmp_path):
    import time
    out, grid = tmp_path / "p", tmp_path / "grid.yaml"
    grid.write_text("chunk_size: 2\n")
    cmd = [sys.executable, "-m", "frontier.cli", "profile", "--model", dense_config, "-tp", "1,2", "--families",
           "linear,attention", "--out", str(out), "--grid", str(grid), "--warmup-ms", "0", "--budget-ms", "10"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while len(list(out.glob("family=*/gpu=cpu/part-*.parquet"))) < 3 and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.kill()  # SIGKILL: no cleanup runs
    proc.wait()
    killed_parts = len(list(out.glob("family=*/gpu=cpu/part-*.parquet")))
    assert killed_parts >= 3
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    linear, attention = read_profiles(out, "linear", "cpu"), read_profiles(out, "attention", "cpu")
    assert len(linear) == 2 * 5 * 3 * 2 and len(attention) == 2 * 10 * 2  # layouts x points x modes
    identity = ["backend", "timing_mode", "op_name", "m", "n", "k", "source_table"]
    assert not linear.duplicated(identity).any()
    # a write killed mid-way leaves only a hidden .tmp-* file, never a partial part-*.parquet


def test_grid_file_with_an_unknown_key_is_refused(dense_config, tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("linear_tokens: [1, 2]\nlinear_token: [3]\n")
    res = profile("--model", dense_config, "--out", str(tmp_path / "o"), "--grid", str(grid), "--dry-run")
    assert res.exit_code == 2 and f"error: grid file {grid} has unknown keys ['linear_token']; valid: " in res.output


@pytest.mark.parametrize("name, content, message", [
    ("bin.yaml", b"\xcb\x00", "'{grid}' is not a UTF-8 text file (byte 0)"),
    ("cut.yaml", b"a: [1,\n", "{grid} is not valid YAML: while parsing a flow node"),
    ("cut.json", b'{"a":', "{grid} is not valid JSON: Expecting value: line 1 column 6 (char 5)"),
    ("word.yaml", b"chunk_size: abc\n", "grid chunk_size='abc' must be an integer >= 1"),
    ("one.yaml", b"linear_tokens: 8\n", "grid linear_tokens=8 must be a non-empty list of positive integers"),
    ("switch.yaml", b"attention_mixed: maybe\n", "grid attention_mixed='maybe' must be true or false"),
    ("dist.yaml", b"moe_distributions: skewed\n", "grid moe_distributions='skewed'; valid: a list of balanced, skewed"),
])
def test_a_grid_file_that_is_not_a_grid_is_one_line(dense_config, tmp_path, name, content, message):
    """Each was a bare decoder message, a YAMLError or a TypeError traceback."""
    grid = tmp_path / name
    grid.write_bytes(content)
    res = profile("--model", dense_config, "--out", str(tmp_path / "o"), "--grid", str(grid), "--dry-run")
    want = "error: " + ("grid file " if not message.startswith("grid ") else "") + message.format(grid=grid)
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == want, res.output


def test_out_folder_with_another_backends_rows_is_refused(dense_config, fast_timing, tmp_path):
    """A root holding vLLM attention rows takes no torch attention rows (and vice versa), so a
    calibration never averages two engines' kernels; families both runs time with torch mix."""
    import pandas as pd

    from frontier.model_spec import load_model_spec
    from frontier.parallel import ParallelSpec
    from frontier.profile_schema import write_profile
    from profiler import ops_attention
    from profiler.cli_entry import check_out_backend
    from profiler.context import RankContext
    from profiler.grid import SweepGrid

    ctx = RankContext(load_model_spec(dense_config), ParallelSpec(), timing=fast_timing)
    rows = ops_attention.run_point(ctx, ops_attention.build_points(ctx, SweepGrid())[0])
    write_profile(pd.DataFrame(rows).assign(backend="vllm"), tmp_path, "attention", "cpu")
    res = profile("--model", dense_config, "--out", str(tmp_path), "--families", "linear,attention", "--dry-run")
    assert res.exit_code == 2 and res.output.strip() == (
        f"error: --out {tmp_path} holds attention rows of backend vllm; this run writes torch "
        "(use another folder per backend)")
    check_out_backend(tmp_path, "cpu", ["attention", "linear"], "vllm")   # what a vLLM run writes: accepted
    check_out_backend(tmp_path, "H200", ["attention"], "torch")           # another GPU's partition
