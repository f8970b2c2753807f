"""P/D roles of an MoE model with DP > 1: each role's DP ranks step in lockstep (simulator.dp_group).

Timelines use an engine whose step costs 10 ms + 1 ms per scheduled token on a rank (the busiest
rank sets the group's step), bytes_per_token = 1000 and links of 1e6 B/s with a 1 ms latency
floor, one link per (P engine, D engine) with ports per engine, so a 32-token prompt transfers
in 1 + 32 = 33 ms and a 16-token one in 17 ms. Engines are numbered replica x dp + rank.
"""

import pytest

from simulator.batch_engine import StepCost
from simulator.cluster import Cluster, Role
from simulator.control_plane import KvPull, PddSpec, RoleLayout, build_links
from simulator.dp_group import LockstepRanks
from simulator.engine_args import EngineArgs
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.kv_transfer import Link, SharedLinkTransfers
from simulator.pd_proxy import PDProxy
from simulator.replica import Replica
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.simulation import SimulationSpec, run_simulation
from simulator.trace import BatchTrace
from simulator.workload import WorkloadSpec

BPT = 1000          # bytes per token
BW = 1e6            # bytes/s
LAT = 0.001         # s


class PerTokenEngine:
    """A rank's step costs 10 ms + 1 ms per scheduled token."""

    def step_cost(self, batch):
        n = sum(batch.new_tokens)
        return StepCost(0.001 * (10 + n), n, n, "NONE")

    def lockstep_costs(self, batches, num_idle):
        return [self.step_cost(b) for b in batches]


def make_pd(p_dp: int, d_dp: int, async_scheduling: bool = False, d_blocks: int = 64):
    loop, trace = EventLoop(), BatchTrace(True)
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256,
                          async_scheduling=async_scheduling)

    def replica(role: str, kv_role: str, dp: int, blocks: int) -> Replica:
        scheds = [Scheduler(cfg, KVCacheManager(blocks, 16, 256), kv_role=kv_role) for _ in range(dp)]
        group = LockstepRanks(scheds) if dp > 1 else scheds[0]
        return Replica(0, loop, group, PerTokenEngine(), trace, on_update=lambda *a: None,
                       async_scheduling=async_scheduling, role=role)

    prefill = Cluster(Role.PREFILL, [replica("P", "producer", p_dp, 64)], "round_robin", p_dp)
    decode = Cluster(Role.DECODE, [replica("D", "consumer", d_dp, d_blocks)], "round_robin", d_dp)
    links = [[Link(f"P{p}/out", f"D{d}/in", BW, LAT) for d in range(d_dp)] for p in range(p_dp)]
    return loop, prefill, decode, links, trace


def run_pd(specs, p_dp, d_dp, **kw):
    loop, prefill, decode, links, trace = make_pd(p_dp, d_dp, **kw)
    client = PDProxy(loop, specs, prefill, decode, SharedLinkTransfers(loop), links, KvPull(BPT), 256, None)
    client.start()
    loop.run()
    assert not client.in_flight and not client.failed
    return {r.request_id: r for r in client.records}, prefill, decode, trace


def rows(trace):
    """(role, dp_rank, start ms, end ms, tokens) per trace row."""
    c = trace.step_cols
    return [(role, rank, round(s * 1e3, 6), round(e * 1e3, 6), n) for role, rank, s, e, n in
            zip(c["role"], c["dp_rank"], c["start_s"], c["end_s"], c["num_tokens"])]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_one_request_idle_decode_rank_runs_dummy_batches(async_scheduling):
    # P (one engine) [0, 42] (32 tokens); D rank 0 admits at 42, pull 42 -> 75; D's group steps
    # [75, 86] (1 recomputed token: first token), [86, 97], [97, 108]; rank 1 has nothing: no row.
    recs, _, decode, trace = run_pd([RequestSpec("a", 0.0, 32, 3)], 1, 2, async_scheduling=async_scheduling)
    a = recs["a"]
    assert a.token_times_s == pytest.approx((0.086, 0.097, 0.108))
    assert (a.prefill_replica, a.decode_replica, a.kv_transfer_s) == (0, 0, pytest.approx(0.033))
    assert rows(trace) == [("P", 0, 0.0, 42.0, 32), ("D", 0, 75.0, 86.0, 1), ("D", 0, 86.0, 97.0, 1),
                           ("D", 0, 97.0, 108.0, 1)]
    assert decode.replicas[0].scheduler.get_request_counts() == (0, 0)


def test_two_requests_both_roles_in_lockstep():
    # P ranks: a (32 tokens) on rank 0, b (16) on rank 1: one group step [0, 42], the slower rank's.
    # D: a -> rank 0, b -> rank 1, admitted at 42; pulls on disjoint links: b lands at 42 + 17 = 59,
    # a at 42 + 33 = 75. D group: [59, 70] b's 1-token step while rank 0 (a still pulling) runs a
    # dummy batch; [70, 81] b; a promoted at the next schedule: [81, 92] a and b (b's last token);
    # [92, 103], [103, 114] a alone.
    specs = [RequestSpec("a", 0.0, 32, 3), RequestSpec("b", 0.0, 16, 3)]
    recs, prefill, _, trace = run_pd(specs, 2, 2)
    assert recs["a"].token_times_s == pytest.approx((0.092, 0.103, 0.114))
    assert recs["b"].token_times_s == pytest.approx((0.070, 0.081, 0.092))
    assert [recs[r].kv_transfer_s for r in "ab"] == pytest.approx([0.033, 0.017])
    assert [(recs[r].prefill_replica, recs[r].decode_replica) for r in "ab"] == [(0, 0), (1, 1)]
    assert rows(trace) == [
        ("P", 0, 0.0, 42.0, 32), ("P", 1, 0.0, 42.0, 16),
        ("D", 1, 59.0, 70.0, 1), ("D", 1, 70.0, 81.0, 1),
        ("D", 0, 81.0, 92.0, 1), ("D", 1, 81.0, 92.0, 1),
        ("D", 0, 92.0, 103.0, 1), ("D", 0, 103.0, 114.0, 1)]
    # each P rank freed its blocks when its own request's read ended
    assert [s.kv.num_free_blocks for s in prefill.replicas[0].scheduler.ranks] == [63, 63]


def test_three_requests_route_to_the_least_loaded_rank():
    # a (t=0) and b (t=0) as above on P ranks 0 and 1; c (t=50 ms, 16 tokens) finds both P ranks
    # empty (finished requests holding blocks for D do not count) and goes to rank 0 (rotation):
    # P [50, 76]. On D at 76: rank 0 holds a (pulling), rank 1 holds b (running): tie, rotation
    # -> rank 0. c pulls from P engine 0 to D engine 0 (a's link, whose pull ended at 75):
    # 76 -> 93. D: [59, 70] b, [70, 81] b, [81, 92] a + b, [92, 103] a, then a and c on rank 0
    # (c promoted at the first schedule after 93): 2 tokens, [103, 115]; [115, 126], [126, 137] c.
    specs = [RequestSpec("a", 0.0, 32, 3), RequestSpec("b", 0.0, 16, 3), RequestSpec("c", 0.05, 16, 3)]
    recs, _, _, trace = run_pd(specs, 2, 2)
    assert [(recs[r].prefill_replica, recs[r].decode_replica) for r in "abc"] == [(0, 0), (1, 1), (0, 0)]
    assert recs["a"].token_times_s == pytest.approx((0.092, 0.103, 0.115))
    assert recs["b"].token_times_s == pytest.approx((0.070, 0.081, 0.092))
    assert recs["c"].token_times_s == pytest.approx((0.115, 0.126, 0.137))
    assert recs["c"].kv_transfer_s == pytest.approx(0.017)
    assert rows(trace)[2:] == [("P", 0, 50.0, 76.0, 16)] + [
        ("D", 1, 59.0, 70.0, 1), ("D", 1, 70.0, 81.0, 1), ("D", 0, 81.0, 92.0, 1), ("D", 1, 81.0, 92.0, 1),
        ("D", 0, 92.0, 103.0, 1), ("D", 0, 103.0, 115.0, 2), ("D", 0, 115.0, 126.0, 1),
        ("D", 0, 126.0, 137.0, 1)]


def test_three_requests_async_scheduling():
    # Same arrivals, async (batch queue of 2): D schedules b's next step while one runs, so b runs
    # [59, 70], [70, 81], [81, 92] alone; a's pull lands at 75 and a is promoted by the schedule at
    # 81, which queues behind the step in flight: [92, 103] (first token), [103, 114]; c's pull
    # (76 -> 93) lands during [92, 103] and the schedule at 103 admits it beside a: 2 tokens on rank
    # 0, [114, 126]; then c [126, 137], [137, 148].
    specs = [RequestSpec("a", 0.0, 32, 3), RequestSpec("b", 0.0, 16, 3), RequestSpec("c", 0.05, 16, 3)]
    recs, _, _, trace = run_pd(specs, 2, 2, async_scheduling=True)
    assert recs["a"].token_times_s == pytest.approx((0.103, 0.114, 0.126))
    assert recs["b"].token_times_s == pytest.approx((0.070, 0.081, 0.092))
    assert recs["c"].token_times_s == pytest.approx((0.126, 0.137, 0.148))
    assert [(recs[r].prefill_replica, recs[r].decode_replica) for r in "abc"] == [(0, 0), (1, 1), (0, 0)]
    assert [r for r in rows(trace) if r[0] == "D"] == [
        ("D", 1, 59.0, 70.0, 1), ("D", 1, 70.0, 81.0, 1), ("D", 1, 81.0, 92.0, 1), ("D", 0, 92.0, 103.0, 1),
        ("D", 0, 103.0, 114.0, 1), ("D", 0, 114.0, 126.0, 2), ("D", 0, 126.0, 137.0, 1),
        ("D", 0, 137.0, 148.0, 1)]


def test_kv_aware_router_sees_a_groups_free_blocks_summed_over_ranks():
    _, _, decode, _, _ = make_pd(1, 2, d_blocks=8)
    group = decode.replicas[0].scheduler
    group.add_request(RequestSpec("a", 0.0, 40, 3), remote_prefill=True)   # 3 blocks on rank 0
    group.schedule()
    assert decode.replicas[0].num_free_kv_blocks() == (7 - 3) + 7
    assert group.rank_of("a") == 0
    with pytest.raises(ValueError, match="'zz' is not unfinished on any DP rank"):
        group.rank_of("zz")


# ---------------------------------------------------------------------------- compiled roles
MOE = dict(model="Qwen/Qwen3-30B-A3B", gpu="H200", max_model_len=4096, enable_expert_parallel=True)


def moe_pdd(pdd: PddSpec, architecture="pdd", **kw):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(**MOE), architecture=architecture, pdd=pdd, keep_batch_trace=True, debug=True,
        workload=WorkloadSpec(num_prompts=24, random_input_len=300, random_output_len=6), **kw))


def test_compiled_moe_roles_step_their_dp_ranks_in_lockstep():
    result = moe_pdd(PddSpec(RoleLayout("prefill", dp=2), RoleLayout("decode", dp=2, replicas=2,
                                                                       router="kv_aware")))
    assert result.summary["completed"] == 24 and result.summary["failed"] == 0
    assert result.summary["num_prefill_gpus"] == 2 and result.summary["num_decode_gpus"] == 4
    prefill, decode = result.roles
    assert len(prefill.cluster.replicas) == 1 and len(decode.cluster.replicas) == 2
    assert {r.prefill_replica for r in result.records} == {0, 1}
    assert {r.decode_replica for r in result.records} == {0, 1, 2, 3}
    c = result.trace.step_cols
    starts: dict[tuple[str, int, int], set[float]] = {}
    for role, rep, step, start, end in zip(c["role"], c["replica_id"], c["step"], c["start_s"], c["end_s"]):
        starts.setdefault((role, rep, step), set()).add((start, end))
    assert all(len(v) == 1 for v in starts.values())      # the ranks of a group share each step
    assert {(role, rank) for role, rank in zip(c["role"], c["dp_rank"])} == {
        ("P", 0), ("P", 1), ("D", 0), ("D", 1)}


def test_links_are_per_engine_of_a_lockstep_role():
    result = moe_pdd(PddSpec(RoleLayout("prefill", dp=2), RoleLayout("decode", dp=2, replicas=2)))
    prefill, decode = result.roles
    links = build_links(prefill, decode, PddSpec())
    assert len(links) == 2 and all(len(row) == 4 for row in links)
    assert links[1][3].src_port == "P1/nvlink/out" and links[1][3].dst_port == "D3/nvlink/in"


def test_afd_prefill_role_may_be_a_lockstep_group():
    from simulator.afd import AfdRole, AfdSpec
    result = moe_pdd(PddSpec(RoleLayout("prefill", dp=2)), architecture="afd",
                     afd=AfdSpec(AfdRole("attention", dp=2), AfdRole("ffn", ep=2)))
    assert result.summary["completed"] == 24 and result.summary["num_prefill_gpus"] == 2
    assert {r.prefill_replica for r in result.records} == {0, 1}


def test_afd_attention_dp_ranks_of_an_moe_model_step_in_lockstep():
    from simulator.afd import AfdRole, AfdSpec
    result = moe_pdd(PddSpec(), architecture="afd", afd=AfdSpec(AfdRole("attention", dp=2), AfdRole("ffn", ep=2)))
    s = result.summary
    assert s["completed"] == 24 and s["attention_lockstep"] is True and s["num_attention_gpus"] == 2
    attention = result.roles[1]
    assert len(attention.cluster.replicas) == 1 and len(attention.cluster.replicas[0].scheduler.ranks) == 2
    assert {r.decode_replica for r in result.records} == {0, 1}
    c = result.trace.steps_table().to_pydict()
    groups: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
    for role, rep, step, start, end, f in zip(c["role"], c["replica_id"], c["step"], c["start_s"], c["end_s"],
                                              c["afd_f_busy_s"]):
        if role == "A":
            groups.setdefault((rep, step), []).append((start, end, f))
    assert all(len({(a, b) for a, b, _ in g}) == 1 for g in groups.values())     # one step per group
    assert max(len(g) for g in groups.values()) == 2 and s["num_attention_steps"] == len(groups)
    # F serves the group once per step (its busiest rank, every rank padded to it), not once per rank
    duration = max(r.finish_s for r in result.records)
    f_once = sum(max(f for *_, f in g) for g in groups.values())
    f_per_rank = sum(f for g in groups.values() for *_, f in g)
    assert s["ffn_busy_fraction"] == pytest.approx(f_once / duration) and f_once < f_per_rank


def test_afd_attention_dp_of_a_dense_model_stays_independent_engines():
    from simulator.afd import AfdRole, AfdSpec
    result = run_simulation(SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096), architecture="afd",
        afd=AfdSpec(AfdRole("attention", dp=2)),
        workload=WorkloadSpec(num_prompts=8, random_input_len=300, random_output_len=6)))
    assert result.summary["completed"] == 8 and result.summary["attention_lockstep"] is False
    assert len(result.roles[1].cluster.replicas) == 2
