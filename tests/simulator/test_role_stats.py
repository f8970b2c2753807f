"""Per-role busy fraction and batch size from the steps trace (simulator/role_stats.py)."""

import json

import pyarrow.parquet as pq
import pytest

from simulator.engine_args import EngineArgs
from simulator.role_stats import bin_width_s, role_summary, role_timeline
from simulator.simulation import SimulationSpec, run_simulation
from simulator.output import write_outputs
from simulator.workload import WorkloadSpec


def _cols(rows):
    """rows: (role, replica, rank, start, end, reqs, tokens)."""
    keys = ("role", "replica_id", "dp_rank", "start_s", "end_s", "num_reqs", "num_tokens")
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


# Two P engines over 10 s: engine 0 busy [0, 2) with 4 requests and [3, 4) with 2; engine 1
# runs two overlapping steps [1, 4) and [2, 5) (micro-batches in flight), 1 request each.
# D engine 0: [5, 10) with 10 requests, 100 tokens.
ROWS = [("P", 0, 0, 0.0, 2.0, 4, 400), ("P", 0, 0, 3.0, 4.0, 2, 200),
        ("P", 1, 0, 1.0, 4.0, 1, 50), ("P", 1, 0, 2.0, 5.0, 1, 50),
        ("D", 0, 0, 5.0, 10.0, 10, 100)]


def test_summary_by_hand():
    s = role_summary(_cols(ROWS), {"P": 2, "D": 2}, 10.0)
    # P busy: engine 0 3 s, engine 1 the union [1, 5) = 4 s -> 7 / (2 x 10)
    assert s["prefill_busy_fraction"] == pytest.approx(0.35, abs=1e-15)
    # request-seconds 4*2 + 2*1 + 1*3 + 1*3 = 16 over step-seconds 2 + 1 + 3 + 3 = 9
    assert s["prefill_mean_batch_size"] == pytest.approx(16 / 9, abs=1e-15)
    assert s["prefill_mean_tokens_per_step"] == pytest.approx((800 + 200 + 150 + 150) / 9, abs=1e-12)
    assert s["prefill_num_steps"] == 4
    # D: one of two engines busy half the time
    assert s["decode_busy_fraction"] == 0.25 and s["decode_mean_batch_size"] == 10.0
    assert s["decode_num_steps"] == 1


def test_timeline_by_hand():
    t = role_timeline(_cols(ROWS), {"P": 2, "D": 2}, 10.0)
    assert bin_width_s(10.0) == 0.02 and len(t["role"]) == 2 * 500
    # bin [2.00, 2.02): P engine 0 idle, engine 1 with two steps in flight (1 request each)
    i = t["bin_start_s"].index(2.0)
    assert t["role"][i] == "P"
    assert t["busy_fraction"][i] == pytest.approx(0.5, abs=1e-9) and t["mean_batch_size"][i] == pytest.approx(1.0)
    j = t["bin_start_s"].index(0.0)     # [0, 0.02): engine 0 alone, 4 requests
    assert t["busy_fraction"][j] == pytest.approx(0.5, abs=1e-9) and t["mean_batch_size"][j] == pytest.approx(4.0)
    # integrating the bins gives the summary back
    busy = sum(b * (e - s) * n for r, s, e, n, b in zip(t["role"], t["bin_start_s"], t["bin_end_s"], t["engines"],
                                                        t["busy_fraction"]) if r == "P")
    assert busy == pytest.approx(7.0, abs=1e-9)
    d = [b for r, b in zip(t["role"], t["busy_fraction"]) if r == "D"]
    assert d[:250] == [0.0] * 250 and d[250:] == pytest.approx([0.5] * 250)


def test_bin_width():
    assert [bin_width_s(x) for x in (0.3, 1.0, 104.2, 3600.0, 1e9)] == [0.001, 0.002, 0.5, 10.0, 500000.0]


def test_pdd_run_reports_roles_and_writes_roles_parquet(tmp_path):
    from simulator.control_plane import PddSpec, RoleLayout
    spec = SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096),
                          workload=WorkloadSpec(dataset_name="random", num_prompts=20, random_input_len=500,
                                                random_output_len=20, request_rate=10.0, seed=0),
                          architecture="pdd", pdd=PddSpec(prefill=RoleLayout("prefill", replicas=2),
                                                          decode=RoleLayout("decode")))
    res = run_simulation(spec)
    s = res.summary
    assert res.role_engines == {"P": 2, "D": 1}
    steps = res.trace.step_cols
    p_steps = [i for i, r in enumerate(steps["role"]) if r == "P"]
    assert s["prefill_num_steps"] == len(p_steps)
    p_busy = sum(steps["end_s"][i] - steps["start_s"][i] for i in p_steps)   # no overlap at pp 1
    assert s["prefill_busy_fraction"] == pytest.approx(p_busy / (2 * res.simulated_duration_s), rel=1e-12)
    assert 0 < s["decode_busy_fraction"] < 1 and s["decode_mean_batch_size"] >= 1
    write_outputs(res, {"output_dir": tmp_path, "perfetto": tmp_path / "trace.json"})
    t = pq.read_table(tmp_path / "roles.parquet").to_pydict()
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    # the same bins as counter tracks: two counters per bin, plus each role's closing values
    assert sum(e["ph"] == "C" for e in events) == 2 * len(t["role"]) + 2 * 2
    assert set(t["role"]) == {"P", "D"} and set(t["engines"]) == {1, 2}
    busy = sum(b * (e - st) * n for r, st, e, n, b in zip(t["role"], t["bin_start_s"], t["bin_end_s"],
                                                         t["engines"], t["busy_fraction"]) if r == "P")
    assert busy == pytest.approx(p_busy, rel=1e-9)


def test_perfetto_counter_tracks_per_role():
    from simulator.perfetto import counter_events
    t = {"role": ["P", "P", "D"], "bin_start_s": [0.0, 1.0, 0.0], "bin_end_s": [1.0, 2.0, 1.0],
         "busy_fraction": [0.5, 0.25, 1.0], "mean_batch_size": [2.0, 1.0, 8.0]}
    ev = counter_events(t)
    busy = [(e["pid"], e["ts"], e["args"]["busy fraction"]) for e in ev if e["name"] == "busy fraction"]
    assert busy == [(2, 0.0, 0.5), (2, 1e6, 0.25), (2, 2e6, 0.25), (3, 0.0, 1.0), (3, 1e6, 1.0)]
    assert all(e["ph"] == "C" for e in ev) and len(ev) == 10
