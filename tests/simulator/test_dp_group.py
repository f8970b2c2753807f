"""DP ranks of an MoE model step in lockstep; dense DP ranks are independent engines."""

import pytest

from simulator.batch_engine import StepCost
from simulator.dp_group import LockstepRanks
from simulator.engine_args import EngineArgs
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.replica import Replica
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.simulation import SimulationSpec, run_simulation
from simulator.trace import BatchTrace
from simulator.workload import WorkloadSpec


class PerTokenEngine:
    """A step costs 1 ms + 1 ms per scheduled token: the busier rank is slower."""

    def step_cost(self, batch):
        n = sum(batch.new_tokens)
        return StepCost(0.001 * (1 + n), n, n, "NONE")

    def lockstep_costs(self, batches, num_idle):
        return [self.step_cost(b) for b in batches]


def group(num_ranks: int):
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256,
                          async_scheduling=False)
    ranks = LockstepRanks([Scheduler(cfg, KVCacheManager(64, 16, 256)) for _ in range(num_ranks)])
    loop = EventLoop()
    replica = Replica(0, loop, ranks, PerTokenEngine(), BatchTrace(True), lambda *a: None,
                      async_scheduling=False)
    return loop, ranks, replica


def test_requests_spread_over_ranks_and_steps_last_as_long_as_the_slowest_rank():
    loop, ranks, replica = group(2)
    replica.add_request(RequestSpec("big", 0.0, 40, 2))     # rank 0
    replica.add_request(RequestSpec("small", 0.0, 4, 2))    # rank 1 (least loaded)
    loop.run()
    cols = replica.trace.step_cols
    assert list(zip(cols["dp_rank"], cols["step"], cols["num_tokens"])) == [
        (0, 0, 40), (1, 0, 4), (0, 1, 1), (1, 1, 1)]
    # step 0 lasts 41 ms on both ranks (the 40-token rank), step 1 lasts 2 ms
    assert cols["start_s"] == pytest.approx([0.0, 0.0, 0.041, 0.041])
    assert cols["end_s"] == pytest.approx([0.041, 0.041, 0.043, 0.043])


def test_idle_rank_does_not_schedule_but_the_group_still_steps():
    loop, ranks, replica = group(3)
    replica.add_request(RequestSpec("a", 0.0, 10, 3))
    loop.run()
    assert set(replica.trace.step_cols["dp_rank"]) == {0}
    assert ranks.get_request_counts() == (0, 0)


def test_one_rank_group_is_refused():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        LockstepRanks([Scheduler(SchedulerConfig(), KVCacheManager(64, 16, 8192))])


def run(model: str, dp: int):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(model=model, gpu="H200", data_parallel_size=dp, max_model_len=4096,
                          enable_expert_parallel=dp > 1 and "A3B" in model),
        workload=WorkloadSpec(num_prompts=16, random_input_len=256, random_output_len=8),
        keep_batch_trace=True))


def test_moe_dp_is_one_lockstep_replica_and_dense_dp_is_independent_engines():
    moe = run("Qwen/Qwen3-30B-A3B", 4)
    assert moe.resolved.lockstep_dp and moe.resolved.num_gpus == 4
    steps = moe.trace.step_cols
    by_step = {}
    for rep, step, start in zip(steps["replica_id"], steps["step"], steps["start_s"]):
        by_step.setdefault((rep, step), set()).add(start)
    assert set(steps["replica_id"]) == {0} and all(len(v) == 1 for v in by_step.values())
    dense = run("meta-llama/Llama-3.1-8B", 4)
    assert not dense.resolved.lockstep_dp
    assert set(dense.trace.step_cols["replica_id"]) == {0, 1, 2, 3}


def test_dp_load_balancer_scores_as_the_release_does():
    """vLLM's DP load balancer (core_client.py): up to 0.26 waiting x 4 + running, the scan from
    rank 0; from 0.27 waiting + running + waiting x 6 x max(0, KV usage - 0.5), the scan start
    advancing one rank per pick."""
    from simulator.dp_group import dp_load_score
    assert dp_load_score(2, 3, 0.9, (0, 26)) == 11
    assert dp_load_score(2, 3, 0.9, (0, 27)) == pytest.approx(5 + 2 * 6 * 0.4)
    assert dp_load_score(0, 3, 0.9, (0, 33)) == 3 and dp_load_score(2, 3, 0.4, (0, 33)) == 5

    def ranks(version, first_tokens=0):
        """rank 0: one request of ``first_tokens`` running (if any) and one waiting; rank 1: three running."""
        cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1024, max_model_len=1024, async_scheduling=False)
        g = LockstepRanks([Scheduler(cfg, KVCacheManager(64, 16, 1024)) for _ in range(2)], version)
        r0, r1 = g.ranks
        if first_tokens:
            r0.add_request(RequestSpec("big", 0.0, first_tokens, 2))
            r0.schedule()
        for i in range(3):
            r1.add_request(RequestSpec(f"b{i}", 0.0, 8, 2))
        r1.schedule()
        r0.add_request(RequestSpec("w", 0.0, 8, 2))
        return g
    assert ranks((0, 26)).pick_rank() == 1          # 4 x 1 waiting > 3 running
    assert ranks((0, 27)).pick_rank() == 0          # 1 < 3
    assert ranks((0, 33), 600).pick_rank() == 0     # 38 of 63 blocks: 2 + 6 x 0.10 = 2.6 < 3
    assert ranks((0, 33), 800).pick_rank() == 1     # 50 of 63 blocks: 2 + 6 x 0.29 = 3.8 > 3
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, async_scheduling=False)
    for version, expect in (((0, 26), [0, 0, 0]), ((0, 27), [0, 1, 0])):   # ties: fixed start, rotating start
        g = LockstepRanks([Scheduler(cfg, KVCacheManager(64, 16, 256)) for _ in range(2)], version)
        assert [g.pick_rank() for _ in range(3)] == expect


def dense_servers(num_servers: int, dp: int, router: str = "round_robin"):
    """``num_servers`` servers of ``dp`` independent engines (PerTokenEngine) in one cluster."""
    from simulator.cluster import Cluster, Role
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, async_scheduling=False)
    loop, trace = EventLoop(), BatchTrace(True)
    engines = [Replica(i, loop, Scheduler(cfg, KVCacheManager(64, 16, 256)), PerTokenEngine(), trace,
                       lambda *a: None, async_scheduling=False) for i in range(num_servers * dp)]
    return loop, Cluster(Role.COLOCATED, engines, router, 1, dp_ranks=dp)


def engine_of(cluster, request_id: str) -> int:
    return next(i for i, e in enumerate(cluster.replicas) if request_id in e.scheduler.requests)


def test_dense_dp_engines_of_one_server_are_picked_by_the_dp_load_balancer():
    """vLLM's API server routes any DP > 1 deployment by the DP load-balancer score (dense ranks
    too, DPLBAsyncMPClient); a per-engine round robin would put "late" on engine 0."""
    loop, cluster = dense_servers(1, 2)
    cluster.submit(RequestSpec("long", 0.0, 40, 20))     # engine 0, busy until ~0.1 s
    cluster.submit(RequestSpec("short", 0.0, 4, 2))      # engine 1, done at 7 ms
    loop.at(0.05, lambda: cluster.submit(RequestSpec("late", 0.05, 4, 2)), 2)
    loop.run(0.05)
    assert (engine_of(cluster, "long"), engine_of(cluster, "late")) == (0, 1)


def test_dense_dp_servers_take_the_router_then_the_balancer():
    """--router picks the server (round robin over 2 servers of 2 engines), the balancer the
    engine: the third request finds its server's engine 0 holding one waiting request."""
    loop, cluster = dense_servers(2, 2)
    for i in range(4):
        cluster.submit(RequestSpec(f"r{i}", 0.0, 8, 2))
    assert [engine_of(cluster, f"r{i}") for i in range(4)] == [0, 2, 1, 3]
    with pytest.raises(ValueError, match="dp_ranks=2"):
        from simulator.cluster import Cluster, Role
        Cluster(Role.COLOCATED, cluster.replicas[:3], "round_robin", 1, dp_ranks=2)
