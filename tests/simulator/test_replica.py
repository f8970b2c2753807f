"""The replica's timed engine loop: same schedule as the untimed driver, exact timelines."""

import random

import pytest

from simulator.batch_engine import StepCost
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.replica import Replica
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.scheduler_trace import run_scheduler_only
from simulator.trace import BatchTrace


class FixedCostEngine:
    """Every step costs ``base_s + per_token_s * tokens``."""

    def __init__(self, base_s: float = 0.010, per_token_s: float = 0.0) -> None:
        self.base_s, self.per_token_s = base_s, per_token_s

    def step_cost(self, batch):
        n = sum(batch.new_tokens)
        return StepCost(self.base_s + self.per_token_s * n, n, n, "NONE")


def make_replica(config: SchedulerConfig, num_blocks: int, engine=None, keep=True):
    loop = EventLoop()
    kv = KVCacheManager(num_blocks, config.block_size, config.max_model_len,
                        enable_prefix_caching=config.enable_prefix_caching)
    events = []
    replica = Replica(0, loop, Scheduler(config, kv), engine or FixedCostEngine(), BatchTrace(keep),
                      on_update=lambda rep, res, t: events.append((t, res)),
                      async_scheduling=config.async_scheduling)
    return loop, replica, events


def steps_of(trace: BatchTrace) -> list[dict[str, int]]:
    cols = trace.req_cols
    steps: dict[int, dict[str, int]] = {}
    for step, rid, n in zip(cols["step"], cols["request_id"], cols["num_scheduled_tokens"]):
        steps.setdefault(step, {})[rid] = n
    return [steps[k] for k in sorted(steps)]


def random_workload(seed: int, n: int) -> list[RequestSpec]:
    rng = random.Random(seed)
    return [RequestSpec(str(i), 0.0, rng.randint(1, 300), rng.randint(1, 40)) for i in range(n)]


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_timed_loop_schedules_like_the_untimed_driver(async_scheduling, seed):
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=128, max_model_len=512,
                             async_scheduling=async_scheduling)
    specs = random_workload(seed, 30)
    expected = run_scheduler_only(specs, config, num_gpu_blocks=60)
    loop, replica, _ = make_replica(config, 60)
    for spec in specs:
        replica.add_request(spec)
    loop.run()
    assert steps_of(replica.trace) == expected


def test_sync_timeline_of_one_request():
    # prompt 40, output 3, budget 32: chunk 32 @[0,10ms], chunk 8 -> token 1 @20ms,
    # decode -> token 2 @30ms, decode -> token 3 @40ms (finished).
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=128,
                             async_scheduling=False)
    loop, replica, events = make_replica(config, 16)
    replica.add_request(RequestSpec("a", 0.0, 40, 3))
    loop.run()
    assert [round(t, 6) for t, _ in events] == [0.02, 0.03, 0.04]
    assert events[0][1].first_token_request_ids == ("a",)
    assert events[-1][1].finished_request_ids == ("a",)
    assert replica.trace.step_cols["start_s"] == pytest.approx([0.0, 0.01, 0.02, 0.03])


def test_async_steps_run_back_to_back_and_finish_without_an_extra_step():
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=128,
                             async_scheduling=True)
    loop, replica, events = make_replica(config, 16)
    replica.add_request(RequestSpec("a", 0.0, 40, 3))
    loop.run()
    assert steps_of(replica.trace) == [{"a": 32}, {"a": 8}, {"a": 1}, {"a": 1}]
    assert replica.trace.step_cols["start_s"] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    assert [round(t, 6) for t, _ in events] == [0.02, 0.03, 0.04]


def test_request_arriving_while_gpu_busy_joins_the_next_schedule():
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128,
                             async_scheduling=False)
    loop, replica, _ = make_replica(config, 32)
    replica.add_request(RequestSpec("a", 0.0, 16, 4))
    loop.at(0.005, lambda: replica.add_request(RequestSpec("b", 0.005, 16, 1)))
    loop.run()
    assert steps_of(replica.trace)[:2] == [{"a": 16}, {"a": 1, "b": 16}]
