"""SGLang scheduler mirror (simulator/sglang_scheduler.py): pinned step sequences of small cases.

Each case is stepped in SGLang's normal loop (schedule, then process that step's output) unless it
says overlap. Rows: (request ids, tokens, contexts, finished after the step, free slots, evictable
tree tokens)."""

import pytest

from simulator.request import RequestSpec
from simulator.sglang_scheduler import SglangConfig, SglangScheduler


def spec(rid: str, n: int, out: int, base: int) -> RequestSpec:
    return RequestSpec(rid, 0.0, n, out, prompt_token_ids=tuple(range(base, base + n)))


def run(cfg: SglangConfig, arrivals: list[tuple[int, RequestSpec]], overlap: bool = False) -> list[tuple]:
    sched = SglangScheduler(cfg)
    pending = sorted(arrivals, key=lambda x: x[0])
    rows, queue = [], []
    for step in range(500):
        while pending and pending[0][0] <= step:
            sched.add_request(pending.pop(0)[1])
        if not sched.has_requests() and not pending:
            if not queue:
                return rows
            sched.update_from_output(queue.pop(0), 0.0)     # overlap: the last step's output
            continue
        out = sched.schedule()
        queue.append(out)
        if overlap and len(queue) < 2:
            rows.append((out.request_ids, out.num_scheduled_tokens, out.context_lens))
            continue
        done = sched.update_from_output(queue.pop(0), 0.0).finished_request_ids
        row = (out.request_ids, out.num_scheduled_tokens, out.context_lens, done, sched.pool.available,
               sched.evictable_size())
        rows.append(row[:3] if overlap else row)
    raise AssertionError("did not finish")


def test_chunked_prefill_runs_first_and_a_shared_prefix_hits():
    cfg = SglangConfig(max_total_tokens=1000, context_length=4096, chunked_prefill_size=32,
                       disable_overlap_schedule=True)
    rows = run(cfg, [(0, spec("a", 100, 3, 0)), (0, spec("b", 10, 3, 0))])
    assert rows == [
        (("a",), (32,), (0,), (), 968, 0),
        (("a",), (32,), (32,), (), 936, 0),
        (("a",), (32,), (64,), (), 904, 0),
        # the last chunk leaves 28 tokens of budget: b hits 9 of a's published tokens (prompt - 1)
        (("a", "b"), (4, 1), (96, 9), (), 900, 0),
        (("a", "b"), (1, 1), (100, 10), (), 898, 0),
        (("a", "b"), (1, 1), (101, 11), ("a", "b"), 896, 104),
    ]


def test_no_token_marks_the_batch_full_until_a_request_leaves():
    cfg = SglangConfig(max_total_tokens=60, context_length=4096, disable_overlap_schedule=True)
    rows = run(cfg, [(0, spec("a", 20, 10, 0)), (0, spec("b", 20, 10, 100)), (0, spec("c", 5, 2, 200))])
    # a reserves 20 + 1 + 10 = 31 of 60: b (31) does not fit, c (8) would, but FCFS stops at b and
    # the full batch tries no prefill while a runs
    assert [r[0] for r in rows] == [("a",)] * 10 + [("b", "c")] * 2 + [("b",)] * 8
    assert rows[9][3:] == (("a",), 31, 29)                      # a's 29 KV tokens stay in the tree
    assert rows[10] == (("b", "c"), (20, 5), (0, 0), (), 6, 29)
    assert rows[-1] == (("b",), (1,), (28,), ("b",), 5, 55)     # decodes evicted a's output leaf (9)


def test_overlap_leaves_out_requests_the_step_in_flight_finishes():
    cfg = SglangConfig(max_total_tokens=1000, context_length=4096)
    rows = run(cfg, [(0, spec("a", 8, 1, 0)), (0, spec("b", 8, 3, 50))], overlap=True)
    # a's only token comes from its prefill: the decode scheduled while that step runs skips it
    assert rows == [
        (("a", "b"), (8, 8), (0, 0)),
        (("b",), (1,), (8,)),
        (("b",), (1,), (9,)),
        ((), (), ()),
    ]


def test_config_refuses_bad_values():
    with pytest.raises(ValueError, match="--schedule-policy 'hrrn' is not simulated; valid: fcfs, lof, lpm"):
        SglangConfig(max_total_tokens=10, context_length=10, schedule_policy="hrrn")
    with pytest.raises(ValueError, match="--chunked-prefill-size 0; must be >= 1 or -1"):
        SglangConfig(max_total_tokens=10, context_length=10, chunked_prefill_size=0)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_replica_drives_the_mirror_to_completion(overlap):
    """simulator.replica runs the mirror as it runs vLLM's (normal loop: sync; overlap: async) and
    every request gets exactly its output tokens, with token times in order."""
    from simulator.batch_engine import BatchEngine
    from simulator.cluster import Cluster, Role
    from simulator.comm.backend import make_comm_backend
    from simulator.cost_model import RooflineCostModel
    from simulator.cuda_graph import CudaGraphConfig
    from simulator.engine_args import EngineArgs
    from simulator.events import EventLoop
    from simulator.replica import Replica
    from simulator.simulation import BenchmarkClient, SimulationSpec, resolve_engine, run_client
    from simulator.trace import BatchTrace
    from simulator.workload import WorkloadSpec, generate_requests

    spec = SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
                          workload=WorkloadSpec(dataset_name="random", num_prompts=60, request_rate=20.0, seed=3))
    resolved = resolve_engine(spec.engine)
    engine = BatchEngine(resolved.model, resolved.parallel, resolved.gpu,
                         RooflineCostModel(resolved.gpu, make_comm_backend("analytical", resolved.gpu)),
                         CudaGraphConfig(enforce_eager=False, capture_sizes=(1, 2, 4, 8, 16, 32), max_num_seqs=32,
                                         mode="FULL_DECODE_ONLY"))
    loop, trace = EventLoop(), BatchTrace(keep_requests=False)
    # a pool of 20k tokens: ~20 random requests of ~1.5k tokens at a time, so admission waits
    sched = SglangScheduler(SglangConfig(max_total_tokens=20_000, context_length=8192,
                                         disable_overlap_schedule=not overlap))
    replica = Replica(0, loop, sched, engine, trace, on_update=lambda *a: None, async_scheduling=overlap)
    specs = generate_requests(spec.workload, vocab_size=resolved.model.vocab_size)
    client = BenchmarkClient(loop, specs, Cluster(Role.COLOCATED, [replica], "round_robin", 1), 8192, None)
    records, summary, _ = run_client(loop, client, spec, len(specs))
    assert summary["completed"] == 60 and summary["failed"] == 0
    want = {s.request_id: s.output_len for s in specs}
    assert all(r.output_len == want[r.request_id] == len(r.token_times_s) for r in records)
    assert all(list(r.token_times_s) == sorted(r.token_times_s) for r in records)
    assert sched.pool.available + sched.evictable_size() == 20_000     # every slot back or in the tree
