"""End-to-end co-located runs: determinism, client behaviour, refusals, replicas."""

import hashlib
import math

import pytest

from simulator.engine_args import EngineArgs
from simulator.output import write_outputs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec

SMALL = dict(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=2048)


def run(workload: WorkloadSpec, **kw):
    client = {k: kw.pop(k) for k in ("max_concurrency", "keep_batch_trace") if k in kw}
    return run_simulation(SimulationSpec(engine=EngineArgs(**{**SMALL, **kw}), workload=workload,
                                         **client))


def test_same_seed_same_files_byte_for_byte(tmp_path):
    wl = WorkloadSpec(num_prompts=40, request_rate=8.0, random_input_len=256,
                      random_output_len=32, random_range_ratio=0.5, seed=3)
    digests = []
    for i in range(2):
        result = run(wl, keep_batch_trace=True)
        paths = write_outputs(result, {"batch_trace": tmp_path / f"{i}/bt.parquet",
                                       "output_dir": tmp_path / f"{i}/out"})
        digests.append([hashlib.sha256(p.read_bytes()).hexdigest() for p in paths
                        if p.suffix == ".parquet"])
    assert digests[0] == digests[1]


def test_every_request_finishes_with_its_output_length():
    wl = WorkloadSpec(num_prompts=50, random_input_len=300, random_output_len=20,
                      random_range_ratio=0.9, seed=1)
    result = run(wl)
    assert result.summary["completed"] == 50 and result.summary["failed"] == 0
    lens = {r.request_id: r.output_len for r in result.records}
    from simulator.workload import generate_requests
    assert lens == {s.request_id: s.output_len for s in generate_requests(wl)}


def test_max_concurrency_holds_requests_at_the_client():
    wl = WorkloadSpec(num_prompts=12, random_input_len=128, random_output_len=8)
    result = run(wl, max_concurrency=3)
    events = sorted([(r.send_s, 1) for r in result.records] + [(r.finish_s, -1) for r in result.records])
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak == 3
    assert sum(r.send_s > r.arrival_s for r in result.records) == 9


def test_prompt_longer_than_max_model_len_is_refused_not_lost(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"request_id": "ok", "arrival_time_s": 0, "prompt_len": 100, "output_len": 4}\n'
                     '{"request_id": "long", "arrival_time_s": 0, "prompt_len": 5000, "output_len": 4}\n')
    result = run(WorkloadSpec(dataset_name="trace", dataset_path=str(trace)))
    assert [r.request_id for r in result.records] == ["ok"]
    assert list(result.failed) == ["long"] and "max_model_len 2048" in result.failed["long"]
    assert result.summary["failed"] == 1


@pytest.mark.parametrize("router", ["round_robin", "least_loaded"])
def test_replicas_share_the_load(router):
    wl = WorkloadSpec(num_prompts=40, random_input_len=128, random_output_len=16)
    result = run(wl, num_replicas=4, router=router, keep_batch_trace=True)
    per_replica = {}
    for rep, step, rid in zip(result.trace.req_cols["replica_id"], result.trace.req_cols["step"],
                              result.trace.req_cols["request_id"]):
        per_replica.setdefault(rep, set()).add(rid)
    assert sorted(len(v) for v in per_replica.values()) == [10, 10, 10, 10]
    assert result.resolved.num_gpus == 4


def test_more_replicas_cut_ttft_under_load():
    wl = WorkloadSpec(num_prompts=200, random_input_len=1024, random_output_len=64, request_rate=40.0)
    one = run(wl).summary["mean_ttft_ms"]
    two = run(wl, num_replicas=2).summary["mean_ttft_ms"]
    assert two < one


def test_summary_carries_simulated_duration_and_wall_time():
    result = run(WorkloadSpec(num_prompts=5, random_input_len=64, random_output_len=4))
    s = result.summary
    assert s["simulated_duration_s"] == result.simulated_duration_s > 0
    assert s["sim_wall_s"] > 0 and s["duration"] == pytest.approx(max(r.finish_s for r in result.records))
    assert s["request_rate"] == "inf" and not math.isnan(s["mean_ttft_ms"])


def test_model_too_big_for_the_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="GiB"):
        run(WorkloadSpec(num_prompts=1), model="meta-llama/Llama-3.1-70B", gpu="L4")


def test_step_jitter_is_seeded_and_changes_timing_not_tokens():
    wl = WorkloadSpec(num_prompts=30, random_input_len=128, random_output_len=16, request_rate=20.0)
    engine = EngineArgs(**SMALL)
    plain = run_simulation(SimulationSpec(engine=engine, workload=wl))
    a = run_simulation(SimulationSpec(engine=engine, workload=wl, step_jitter=0.1))
    b = run_simulation(SimulationSpec(engine=engine, workload=wl, step_jitter=0.1))
    assert a.summary["mean_tpot_ms"] == b.summary["mean_tpot_ms"] != plain.summary["mean_tpot_ms"]
    assert a.summary["total_output_tokens"] == plain.summary["total_output_tokens"]
    with pytest.raises(ValueError, match="--step-jitter"):
        SimulationSpec(step_jitter=1.5)


def test_stream_interval_groups_tokens_into_chunks_as_vllms_output_processor_sends_them():
    from array import array

    from simulator.simulation import _delivered_times
    steps = array("d", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])         # one token a step
    assert _delivered_times(steps, 1) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    # the first token at once, then every 3 unsent tokens, the rest when the request finishes
    assert _delivered_times(steps, 3) == [1.0, 4.0, 7.0]
    assert _delivered_times(steps, 4) == [1.0, 5.0, 7.0]
    # speculative steps of several tokens: a step is sent once 3 or more tokens wait
    spec = array("d", [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0])
    assert _delivered_times(spec, 1) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert _delivered_times(spec, 3) == [1.0, 3.0, 5.0]
    assert _delivered_times(array("d", [1.0]), 8) == [1.0]


def test_stream_interval_changes_the_itl_only():
    def run(interval: int):
        return run_simulation(SimulationSpec(
            engine=EngineArgs(max_model_len=4096, stream_interval=interval),
            workload=WorkloadSpec(dataset_name="random", num_prompts=40, request_rate=10.0, random_input_len=300,
                                  random_output_len=41))).summary
    one, four = run(1), run(4)
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "completed"):
        assert four[key] == one[key]
    # 40 tokens after the first: 10 chunks of 4 instead of 40 of 1, so each gap spans ~4 steps
    assert four["mean_itl_ms"] == pytest.approx(4 * one["mean_itl_ms"], rel=0.05)
    with pytest.raises(ValueError, match="--stream-interval must be a positive integer, got 0"):
        EngineArgs(stream_interval=0)
