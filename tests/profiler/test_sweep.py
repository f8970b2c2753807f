"""Sweeps: chunk keys are deterministic; a killed sweep resumed equals an uninterrupted one."""

import io

import pandas as pd
import pytest

from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from frontier.profile_schema import read_profiles
from profiler import sweep
from profiler.context import RankContext
from profiler.grid import SweepGrid

FAMILIES = ["linear", "attention", "memory"]
TIMING_COLS = ["latency_s_median", "latency_s_p10", "latency_s_p90", "num_samples", "kernel_source", "git_sha"]


def contexts(config, timing):
    model = load_model_spec(config)
    return [RankContext(model, ParallelSpec(tp=tp), timing=timing) for tp in (1, 2)]


def masked(root):
    frames = []
    for family in FAMILIES:
        df = read_profiles(root, family, "cpu").drop(columns=TIMING_COLS)
        df = df.astype(str).sort_values(list(df.columns)).reset_index(drop=True)
        frames.append(df)
    return frames


class Killed(Exception):
    pass


def test_plan_is_deterministic_and_chunks_are_distinct(dense_config, fast_timing):
    grid = SweepGrid(chunk_size=3)
    a = sweep.plan(contexts(dense_config, fast_timing), FAMILIES, grid)
    b = sweep.plan(contexts(dense_config, fast_timing), FAMILIES, grid)
    assert [c.key for c in a] == [c.key for c in b]
    assert len({c.key for c in a}) == len(a)
    assert all(len(c.points) <= 3 for c in a)


def test_killed_sweep_resumed_gives_the_rows_of_an_uninterrupted_one(dense_config, fast_timing, tmp_path):
    grid = SweepGrid(linear_tokens=(1, 8), attention_prefill_tokens=(16,), chunk_size=3)
    chunks = sweep.plan(contexts(dense_config, fast_timing), FAMILIES, grid)
    full = sweep.run(chunks, tmp_path / "full", stream=io.StringIO())
    assert full.skipped_chunks == 0 and len(full.written) == len(chunks)

    def kill_after_5(n):
        if n == 5:
            raise Killed

    with pytest.raises(Killed):
        sweep.run(chunks, tmp_path / "resumed", stream=io.StringIO(), on_chunk_done=kill_after_5)
    partial = sweep.run(chunks, tmp_path / "resumed", stream=io.StringIO(), max_chunks=4)  # a second, limited run
    assert partial.skipped_chunks == 5 and len(partial.written) == 4
    rest = sweep.run(chunks, tmp_path / "resumed", stream=io.StringIO())
    assert rest.skipped_chunks == 9 and len(rest.written) == len(chunks) - 9
    again = sweep.run(chunks, tmp_path / "resumed", stream=io.StringIO())
    assert again.rows == 0 and again.skipped_chunks == len(chunks)
    for a, b in zip(masked(tmp_path / "full"), masked(tmp_path / "resumed")):
        pd.testing.assert_frame_equal(a, b)
    assert sum(len(df) for df in masked(tmp_path / "resumed")) == full.rows


def test_progress_line_has_an_eta_and_dry_run_estimate_scales_with_budget(dense_config, fast_timing, tmp_path):
    chunks = sweep.plan(contexts(dense_config, fast_timing), ["linear"], SweepGrid(chunk_size=100))
    stream = io.StringIO()
    sweep.run(chunks, tmp_path, stream=stream)
    assert "points 30/30" in stream.getvalue() and "ETA" in stream.getvalue()
    assert sweep.estimate_s(chunks) == pytest.approx(30 * (2 * 0.001 + 0.01))


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown family 'norms'; valid: linear, attention, moe, elementwise, memory"):
        sweep.check_families(["norms"])
