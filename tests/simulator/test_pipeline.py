"""Pipeline parallelism: the stage recurrence, stage split of a step, and PP replica timelines."""

import pytest

from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchShape, StepCost, pp_layer_partition
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.pipeline import max_concurrent_batches, stage_ends
from simulator.replica import Replica
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.trace import BatchTrace
from tests.simulator.test_batch_engine import LLAMA_8B, engine


class StagedEngine:
    """Every step has ``num_stages`` stages of ``stage_s`` each, whatever its batch."""

    def __init__(self, stage_s: float, num_stages: int) -> None:
        self.stage_s, self.num_stages = stage_s, num_stages

    def step_cost(self, batch):
        n = sum(batch.new_tokens)
        return StepCost(self.stage_s * self.num_stages, n, n, "NONE")

    def stage_times_s(self, batch):
        return (self.stage_s,) * self.num_stages


def test_max_concurrent_batches_is_vllms():
    assert max_concurrent_batches(2, True) == 3        # model runner V2: pp + 1
    assert max_concurrent_batches(4, True) == 5
    assert max_concurrent_batches(2, False) == 2       # sync: pp


def test_stage_recurrence_by_hand():
    # idle pipe: stages run back to back
    assert stage_ends(1.0, (2.0, 3.0), (0.0, 0.0)) == [3.0, 6.0]
    # stage 1 still busy with the previous step until 7: stage 1 waits for it
    assert stage_ends(1.0, (2.0, 3.0), (0.0, 7.0)) == [3.0, 10.0]
    # stage 0 busy until 4: the whole step shifts
    assert stage_ends(1.0, (2.0, 3.0), (4.0, 5.0)) == [6.0, 9.0]
    # three steps launched at 0 into an idle 3-stage pipe of 1 s stages: one leaves per second
    free = [0.0, 0.0, 0.0]
    ends = []
    for _ in range(3):
        free = stage_ends(0.0, (1.0, 1.0, 1.0), free)
        ends.append(free[-1])
    assert ends == [3.0, 4.0, 5.0]
    with pytest.raises(ValueError):
        stage_ends(0.0, (1.0,), (0.0, 0.0))


def test_layer_partition_is_vllms_get_pp_indices():
    assert pp_layer_partition(32, 2) == [16, 16]
    assert pp_layer_partition(32, 3) == [11, 11, 10]
    assert pp_layer_partition(80, 3) == [27, 27, 26]
    assert pp_layer_partition(61, 4) == [15, 15, 16, 15]


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_stage_times_split_the_step_cost(pp):
    e = engine(parallel=ParallelSpec(pp=pp))
    for batch in (BatchShape((1,) * 8, (1024,) * 8), BatchShape((512, 1), (0, 300))):
        stages = e.stage_times_s(batch)
        assert len(stages) == pp
        assert sum(stages) == pytest.approx(e.step_cost(batch).duration_s, rel=1e-12)
        assert min(stages) > 0
    assert engine().stage_times_s(BatchShape((1,), (10,))) == (engine().step_cost(BatchShape((1,), (10,))).duration_s,)


def test_equal_llama_stages_are_nearly_equal():
    # 32 layers / 2: stage 0 has the embedding and a p2p send, stage 1 the lm_head and sampler
    stages = engine(parallel=ParallelSpec(pp=2)).stage_times_s(BatchShape((1,) * 64, (1024,) * 64))
    assert stages[0] == pytest.approx(stages[1], rel=0.1)
    assert LLAMA_8B.num_layers == 32


def run(engine_, config, specs):
    loop = EventLoop()
    kv = KVCacheManager(200, config.block_size, config.max_model_len)
    events = []
    replica = Replica(0, loop, Scheduler(config, kv), engine_, BatchTrace(True),
                      on_update=lambda rep, res, t: events.append((round(t, 9), res)),
                      async_scheduling=config.async_scheduling)
    for spec in specs:
        replica.add_request(spec)
    loop.run()
    tokens = {}
    for t, res in events:
        for rid in res.token_request_ids:
            tokens.setdefault(rid, []).append(t)
    steps = list(zip([round(x, 9) for x in replica.trace.step_cols["start_s"]],
                     [round(x, 9) for x in replica.trace.step_cols["end_s"]]))
    return tokens, steps


def test_sync_pp2_timeline_two_micro_batches():
    # budget 16: A's prompt is step 1, B's step 2 (A in flight, nothing to schedule for it);
    # 5 ms stages; batch queue of pp = 2 steps:
    #   stage 0 [A ][B ][A ][B ]
    #   stage 1     [A ][B ][A ][B ]     tokens: A 10, 20; B 15, 25 (serially: 20, 40 / 30, ...)
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=16, max_model_len=256,
                             async_scheduling=False, pipeline_parallel_size=2)
    tokens, steps = run(StagedEngine(0.005, 2), config,
                        [RequestSpec("a", 0.0, 16, 2), RequestSpec("b", 0.0, 16, 2)])
    assert tokens == {"a": [0.010, 0.020], "b": [0.015, 0.025]}
    assert steps == [(0.0, 0.010), (0.005, 0.015), (0.010, 0.020), (0.015, 0.025)]


def test_async_pp2_timeline_with_decode_stagger():
    # async, queue of pp + 1 = 3; a request decoded in step N is next eligible in step N + 2,
    # so A and B alternate and every step overlaps the previous one by a stage.
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=16, max_model_len=256,
                             async_scheduling=True, pipeline_parallel_size=2)
    tokens, steps = run(StagedEngine(0.005, 2), config,
                        [RequestSpec("a", 0.0, 16, 3), RequestSpec("b", 0.0, 16, 3)])
    assert tokens == {"a": [0.010, 0.020, 0.030], "b": [0.015, 0.025, 0.035]}
    assert steps == [(0.0, 0.010), (0.005, 0.015), (0.010, 0.020), (0.015, 0.025),
                     (0.020, 0.030), (0.025, 0.035)]


def test_pp2_overlap_nearly_doubles_throughput_over_the_serial_sum():
    # Two decode micro-batches of 16 (the budget admits 16 prompts per step). Pipelined: a step
    # leaves every 5 ms stage; serial (one 10 ms step at a time, the old sum-of-stages model).
    config = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=256, max_model_len=512,
                             async_scheduling=True, pipeline_parallel_size=2)
    specs = [RequestSpec(f"r{i:02d}", 0.0, 16, 100) for i in range(32)]
    piped, _ = run(StagedEngine(0.005, 2), config, specs)
    serial, _ = run(StagedEngine(0.010, 1), config, specs)
    end_piped = max(t[-1] for t in piped.values())
    end_serial = max(t[-1] for t in serial.values())
    assert sum(map(len, piped.values())) == sum(map(len, serial.values())) == 3200
    assert 1.9 < end_serial / end_piped <= 2.0


def test_pp2_simulation_overlaps_steps_and_pp1_does_not():
    from simulator.engine_args import EngineArgs
    from simulator.simulation import SimulationSpec, run_simulation
    from simulator.workload import WorkloadSpec

    def overlaps(pp):
        spec = SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096,
                                                pipeline_parallel_size=pp),
                              workload=WorkloadSpec(num_prompts=40, random_input_len=200, random_output_len=20))
        result = run_simulation(spec)
        assert result.summary["completed"] == 40
        cols = result.trace.step_cols
        return sum(b < a for a, b in zip(cols["end_s"], cols["start_s"][1:]))

    assert overlaps(1) == 0
    assert overlaps(2) > 10
