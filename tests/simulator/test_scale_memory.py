"""Compact per-request state at scale gives the same results as the plain Python containers."""

from array import array

from simulator.engine_args import EngineArgs
from simulator.kv_cache.block_pool import FreeBlockQueue
from simulator.metrics import RequestRecord, summarize
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def test_summary_from_array_token_times_equals_the_tuple_one():
    spec = SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096),
                          workload=WorkloadSpec(num_prompts=60, request_rate=30.0, random_input_len=300,
                                                random_output_len=40, random_range_ratio=0.5))
    result = run_simulation(spec)
    assert all(isinstance(r.token_times_s, array) for r in result.records)
    as_tuples = [RequestRecord(r.request_id, r.arrival_s, r.send_s, r.first_token_s, r.finish_s, r.prompt_len,
                               r.output_len, tuple(r.token_times_s), r.num_preemptions, r.num_prefix_hit_tokens)
                 for r in result.records]
    kw = dict(request_rate=30.0, max_concurrency=None, model_id="m")
    a = summarize(result.records, result.summary["duration"], **kw)
    b = summarize(as_tuples, result.summary["duration"], **kw)
    assert a == b


def test_free_queue_links_in_arrays_keep_vllm_order():
    q = FreeBlockQueue(6)
    assert q.popleft_n(2) == [0, 1]
    q.append_n([1])
    q.prepend_n([0])
    q.remove(3)
    assert q.order() == [0, 2, 4, 5, 1] and q.num_free_blocks == 5
