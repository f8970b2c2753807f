"""P/D disaggregation: scheduler paths (vLLM NixlConnector), the KV transfer, exact timelines, errors.

Timelines use a fixed-cost engine (every step 10 ms), bytes_per_token = 1000 and a link of
1e6 B/s with a 1 ms latency floor, so a 32-token prompt transfers in 1 + 32 = 33 ms.
"""

import pytest

from simulator.cluster import Cluster, Role
from simulator.control_plane import KvPull, PddSpec, RoleLayout
from simulator.engine_args import EngineArgs
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.kv_transfer import Link, SharedLinkTransfers
from simulator.pd_proxy import PDProxy
from simulator.replica import Replica
from simulator.request import RequestSpec, RequestStatus
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.simulation import SimulationSpec, run_simulation
from simulator.trace import BatchTrace
from simulator.batch_engine import StepCost
from simulator.workload import WorkloadSpec

BPT = 1000          # bytes per token
BW = 1e6            # bytes/s
LAT = 0.001         # s


class FixedCostEngine:
    """Every step costs ``base_s`` (as tests/simulator/test_replica.py's)."""

    def __init__(self, base_s: float) -> None:
        self.base_s = base_s

    def step_cost(self, batch):
        n = sum(batch.new_tokens)
        return StepCost(self.base_s, n, n, "NONE")


def config(async_scheduling=False, **kw):
    base = dict(max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256,
                async_scheduling=async_scheduling)
    base.update(kw)
    return SchedulerConfig(**base)


def sched(role, num_blocks=64, **kw):
    cfg = config(**kw)
    return Scheduler(cfg, KVCacheManager(num_blocks, cfg.block_size, cfg.max_model_len), kv_role=role)


# ---------------------------------------------------------------------------- scheduler paths
def test_consumer_allocates_the_whole_prompt_and_waits_outside_running():
    s = sched("consumer", num_blocks=16)
    r = s.add_request(RequestSpec("a", 0.0, 40, 3), remote_prefill=True)
    out = s.schedule()
    assert out.total_num_scheduled_tokens == 0 and out.remote_kv_request_ids == ("a",)
    assert r.status == RequestStatus.WAITING_FOR_REMOTE_KVS and not s.running
    assert len(s.kv.get_block_ids("a")) == 3            # ceil(40 / 16): the whole prompt at once
    assert r.num_computed_tokens == 40
    assert s.has_unfinished_requests() and s.get_request_counts() == (0, 1)
    assert s.schedule().total_num_scheduled_tokens == 0  # pull not done: skipped
    s.finish_remote_kv("a")
    out = s.schedule()
    assert out.as_dict() == {"a": 1} and out.context_lens == (39,)   # num_tokens - 1 recomputed
    assert out.new_request_ids == ("a",) and r.status == RequestStatus.RUNNING
    assert s.kv.num_cached_block["a"] == 2               # the full prompt blocks are cached
    res = s.update_from_output(out)
    assert res.first_token_request_ids == ("a",)


def test_consumer_admission_needs_free_blocks_for_the_prompt():
    s = sched("consumer", num_blocks=4)                  # 3 usable blocks
    s.add_request(RequestSpec("a", 0.0, 32, 3), remote_prefill=True)
    s.add_request(RequestSpec("b", 0.0, 32, 3), remote_prefill=True)
    out = s.schedule()
    assert out.remote_kv_request_ids == ("a",)           # b: 2 blocks > 1 free -> head-of-line stop
    assert s.requests["b"].status == RequestStatus.WAITING


def test_kv_holding_waiting_is_served_before_waiting():
    s = sched("consumer")
    s.add_request(RequestSpec("a", 0.0, 20, 2), remote_prefill=True)
    s.schedule()
    s.add_request(RequestSpec("b", 0.0, 20, 2))         # a local request, queued in waiting
    s.finish_remote_kv("a")
    out = s.schedule()
    assert out.request_ids == ("a", "b") and out.as_dict() == {"a": 1, "b": 20}


def test_producer_keeps_blocks_until_the_decode_side_has_read_them():
    s = sched("producer", num_blocks=16)
    s.add_request(RequestSpec("a", 0.0, 40, 1), remote_decode=True)
    res = s.update_from_output(s.schedule())
    assert res.finished_request_ids == ("a",)
    assert s.kv.num_free_blocks == 15 - 3 and not s.has_unfinished_requests()
    assert s.num_delayed_free_requests() == 1
    s.finish_sending_kv("a")
    assert s.kv.num_free_blocks == 15 and s.num_delayed_free_requests() == 0
    s.kv.check_invariants()


def test_kv_flags_need_the_matching_role():
    with pytest.raises(ValueError, match="remote_prefill needs kv_role='consumer'"):
        sched("producer").add_request(RequestSpec("a", 0.0, 4, 1), remote_prefill=True)
    with pytest.raises(ValueError, match="remote_decode needs kv_role='producer'"):
        sched(None).add_request(RequestSpec("a", 0.0, 4, 1), remote_decode=True)


# ---------------------------------------------------------------------------- link sharing
def test_transfer_alone_takes_latency_plus_bytes_over_bandwidth():
    loop, done = EventLoop(), {}
    xfer = SharedLinkTransfers(loop)
    xfer.start("a", Link("P0", "D0", 1000.0, 0.01), 100, lambda: done.setdefault("a", loop.now_s))
    loop.run()
    assert done["a"] == pytest.approx(0.11)


def test_two_concurrent_transfers_on_one_link_each_take_twice_as_long():
    loop, done = EventLoop(), {}
    xfer = SharedLinkTransfers(loop)
    link = Link("P0", "D0", 1000.0)
    for key in ("a", "b"):
        xfer.start(key, link, 100, lambda k=key: done.setdefault(k, loop.now_s))
    loop.run()
    assert done == pytest.approx({"a": 0.2, "b": 0.2})


def test_rates_are_recomputed_when_a_transfer_starts_and_ends():
    # a alone for 50 ms (50 B), then a and b share (500 B/s each): a ends at 0.15 s;
    # b has 50 B left and the whole link: ends at 0.2 s.
    loop, done = EventLoop(), {}
    xfer = SharedLinkTransfers(loop)
    link = Link("P0", "D0", 1000.0)
    xfer.start("a", link, 100, lambda: done.setdefault("a", loop.now_s))
    loop.at(0.05, lambda: xfer.start("b", link, 100, lambda: done.setdefault("b", loop.now_s)))
    loop.run()
    assert done == pytest.approx({"a": 0.15, "b": 0.2})


def test_transfers_on_disjoint_ports_do_not_share():
    loop, done = EventLoop(), {}
    xfer = SharedLinkTransfers(loop)
    xfer.start("a", Link("P0/out", "D0/in", 1000.0), 100, lambda: done.setdefault("a", loop.now_s))
    xfer.start("b", Link("P1/out", "D1/in", 1000.0), 100, lambda: done.setdefault("b", loop.now_s))
    loop.run()
    assert done == pytest.approx({"a": 0.1, "b": 0.1})


# ---------------------------------------------------------------------------- timelines
def make_pd(async_scheduling=False, d_blocks=64, n_prefill=1, n_decode=1):
    loop, trace = EventLoop(), BatchTrace(True)

    def replicas(role, kv_role, n, blocks):
        out = []
        for i in range(n):
            cfg = config(async_scheduling)
            s = Scheduler(cfg, KVCacheManager(blocks, cfg.block_size, cfg.max_model_len), kv_role=kv_role)
            out.append(Replica(i, loop, s, FixedCostEngine(0.010), trace, on_update=lambda *a: None,
                               async_scheduling=async_scheduling, role=role))
        return out

    prefill = Cluster(Role.PREFILL, replicas("P", "producer", n_prefill, 64), "round_robin", 1)
    decode = Cluster(Role.DECODE, replicas("D", "consumer", n_decode, d_blocks), "round_robin", 1)
    links = [[Link(f"P{p}", f"D{d}", BW, LAT) for d in range(n_decode)] for p in range(n_prefill)]
    return loop, prefill, decode, links, trace


def run_pd(specs, **kw):
    loop, prefill, decode, links, trace = make_pd(**kw)
    client = PDProxy(loop, specs, prefill, decode, SharedLinkTransfers(loop), links, KvPull(BPT), 256, None)
    client.start()
    loop.run()
    return {r.request_id: r for r in client.records}, prefill, decode, trace


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_one_request_timeline(async_scheduling):
    # P prefill [0, 10 ms] -> D admits at 10 ms, transfer 10 -> 43 ms (1 ms + 32 ms),
    # D 1-token step [43, 53] = first token, decodes [53, 63], [63, 73].
    recs, prefill, _, trace = run_pd([RequestSpec("a", 0.0, 32, 3)], async_scheduling=async_scheduling)
    a = recs["a"]
    assert a.token_times_s == pytest.approx((0.053, 0.063, 0.073))
    assert a.kv_transfer_s == pytest.approx(0.033)
    assert (a.prefill_replica, a.decode_replica, a.output_len) == (0, 0, 3)
    steps = trace.step_cols
    assert steps["role"] == ["P", "D", "D", "D"]
    assert steps["start_s"] == pytest.approx([0.0, 0.043, 0.053, 0.063])
    assert steps["num_tokens"] == [32, 1, 1, 1]
    assert prefill.replicas[0].scheduler.kv.num_free_blocks == 63     # freed after D's read


def test_prefill_blocks_are_held_until_the_transfer_ends():
    loop, prefill, decode, links, _ = make_pd()
    client = PDProxy(loop, [RequestSpec("a", 0.0, 32, 3)], prefill, decode, SharedLinkTransfers(loop),
                     links, KvPull(BPT), 256, None)
    client.start()
    p_kv = prefill.replicas[0].scheduler.kv
    loop.run(until_s=0.042)
    assert p_kv.num_free_blocks == 63 - 2
    loop.run(until_s=0.0435)
    assert p_kv.num_free_blocks == 63


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_request_waits_for_decode_blocks(async_scheduling):
    # D has 3 usable blocks: a (2 prompt blocks, a 3rd at its 2nd decode step) fits, b waits until
    # a finishes at 73 ms; then b's transfer 73 -> 106 ms and its steps [106,116], [116,126], [126,136].
    specs = [RequestSpec("a", 0.0, 32, 3), RequestSpec("b", 0.0, 32, 3)]
    recs, prefill, _, _ = run_pd(specs, async_scheduling=async_scheduling, d_blocks=4)
    assert recs["a"].token_times_s == pytest.approx((0.053, 0.063, 0.073))
    assert recs["b"].token_times_s == pytest.approx((0.116, 0.126, 0.136))
    assert recs["b"].kv_transfer_s == pytest.approx(0.033)
    assert prefill.replicas[0].scheduler.kv.num_free_blocks == 63


def test_two_concurrent_transfers_share_the_link():
    # both prefilled in one P step [0, 10]; both pulled from 10 ms over one link: data 64 ms each
    # -> both land at 75 ms; one D step [75, 85] gives both first tokens.
    specs = [RequestSpec("a", 0.0, 32, 3), RequestSpec("b", 0.0, 32, 3)]
    recs, *_ = run_pd(specs)
    for rid in ("a", "b"):
        assert recs[rid].kv_transfer_s == pytest.approx(0.065)
        assert recs[rid].token_times_s == pytest.approx((0.085, 0.095, 0.105))


def test_three_requests_share_the_prefill_engines_port():
    # a -> D0, b -> D1, c -> D0, all pulled from P0, whose egress port they share.
    # P steps: [0,10] a+b, c (arrives at 5 ms) [10,20]. Data phases: a, b from 11 ms at 500 kB/s
    # each; at 21 ms (5000 B done) c joins: 333.3 kB/s each; a and b land at 21 + 27 ms / (1/3)
    # = 102 ms; c has 5000 B left, alone: 107 ms. D0: a's 1-token step [102,112]; c, ready at
    # 107, joins a at 112: [112,122] (c's first token), [122,132].
    specs = [RequestSpec("a", 0.0, 32, 3), RequestSpec("b", 0.0, 32, 3), RequestSpec("c", 0.005, 32, 2)]
    recs, *_ = run_pd(specs, n_decode=2)
    assert [recs[r].decode_replica for r in "abc"] == [0, 1, 0]
    assert [recs[r].kv_transfer_s for r in "abc"] == pytest.approx([0.092, 0.092, 0.087])
    assert recs["a"].token_times_s == pytest.approx((0.112, 0.122, 0.132))
    assert recs["b"].token_times_s == pytest.approx((0.112, 0.122, 0.132))
    assert recs["c"].token_times_s == pytest.approx((0.122, 0.132))


# ---------------------------------------------------------------------------- control plane
SMALL = dict(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096)


def pdd_spec(pdd=None, **engine):
    return SimulationSpec(engine=EngineArgs(**{**SMALL, **engine}),
                          workload=WorkloadSpec(num_prompts=8, random_input_len=300, random_output_len=8),
                          architecture="pdd", pdd=pdd, debug=True)


def test_pdd_end_to_end_with_heterogeneous_roles():
    pdd = PddSpec(RoleLayout("prefill", replicas=2), RoleLayout("decode", tp=2, gpu="H200", router="kv_aware"))
    result = run_simulation(pdd_spec(pdd))
    assert result.summary["completed"] == 8 and result.summary["failed"] == 0
    assert result.summary["num_gpus"] == 2 + 2
    assert {r.prefill_replica for r in result.records} == {0, 1}
    assert all(r.kv_transfer_s > 0 and r.output_len == 8 for r in result.records)
    assert [role.resolved.gpu.name for role in result.roles] == ["H100-SXM", "H200"]


def test_each_role_has_its_own_batch_limits():
    """Each role is its own vllm serve: --prefill-max-num-seqs 1 makes the prefill engine take one
    request per step (8 requests, 8 prefill steps), while decode batches all of them."""
    pdd = PddSpec(RoleLayout("prefill", max_num_seqs=1, max_num_batched_tokens=512),
                  RoleLayout("decode", max_num_seqs=8, max_num_batched_tokens=8))
    result = run_simulation(pdd_spec(pdd))
    prefill, decode = (role.resolved.args for role in result.roles)
    assert (prefill.max_num_seqs, prefill.max_num_batched_tokens) == (1, 512)
    assert (decode.max_num_seqs, decode.max_num_batched_tokens) == (8, 8)
    assert result.summary["completed"] == 8
    steps = result.trace.step_cols
    pre = [n for n, role in zip(steps["num_reqs"], steps["role"]) if role == "P"]
    assert pre == [1] * 8                                   # one 300-token prompt per prefill step
    default = run_simulation(pdd_spec(PddSpec(RoleLayout("prefill", replicas=1))))
    assert [role.resolved.args.max_num_seqs for role in default.roles] == [None, None]   # the main flags'


def test_prefill_role_reports_its_prefix_cache_hits():
    """8 prompts of a shared 256-token prefix and 300 random tokens, alternating over two prefill
    engines: each engine's first prompt misses, its other three hit the prefix's 16 blocks; the
    decode role's allocations (the pulled KV) are not lookups."""
    pdd = PddSpec(RoleLayout("prefill", replicas=2), RoleLayout("decode"))
    workload = WorkloadSpec(num_prompts=8, random_input_len=300, random_output_len=8, random_prefix_len=256,
                            request_rate=10.0, seed=1)
    result = run_simulation(SimulationSpec(engine=EngineArgs(**SMALL, enable_prefix_caching=True),
                                           workload=workload, architecture="pdd", pdd=pdd, debug=True))
    s = result.summary
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"], s["prefix_cache_scope"]) == (8 * 556, 6 * 256,
                                                                                            "prefill role")
    assert s["prefix_cache_hit_rate"] == 6 * 256 / (8 * 556)
    assert sorted((r.prefill_replica, r.num_prefix_hit_tokens) for r in result.records) == [
        (0, 0), (0, 256), (0, 256), (0, 256), (1, 0), (1, 256), (1, 256), (1, 256)]
    off = run_simulation(SimulationSpec(engine=EngineArgs(**SMALL, enable_prefix_caching=False),
                                        workload=workload, architecture="pdd", pdd=pdd, debug=True))
    assert "prefix_cache_queries" not in off.summary


@pytest.mark.parametrize("pdd, engine, message", [
    (PddSpec(RoleLayout("prefill", gpu="X100")), {}, "prefill role: unknown GPU 'X100'"),
    (PddSpec(decode=RoleLayout("decode", max_num_seqs=300, max_num_batched_tokens=200)), {},
     "decode role: max_num_batched_tokens=200; must be >= max_num_seqs=300"),
    (PddSpec(RoleLayout("prefill", gpu="L4")), {"max_model_len": 131072},
     "prefill role: vLLM would not start: one request of max_model_len 131072 needs 8192 KV blocks"),
    (PddSpec(decode=RoleLayout("decode", tp=3)), {}, "decode role"),
])
def test_role_errors_name_the_role(pdd, engine, message):
    with pytest.raises(ValueError, match=message):
        run_simulation(pdd_spec(pdd, **engine))


def test_layout_errors():
    with pytest.raises(ValueError, match="--prefill-replicas must be a positive integer, got 0"):
        RoleLayout("prefill", replicas=0)
    with pytest.raises(ValueError, match="--prefill-router 'kv_aware' is not one of"):
        RoleLayout("prefill", router="kv_aware")
    with pytest.raises(ValueError, match="--decode-max-num-batched-tokens must be a positive integer, got 0"):
        RoleLayout("decode", max_num_batched_tokens=0)
    with pytest.raises(ValueError, match="need --architecture pdd"):
        SimulationSpec(pdd=PddSpec())
    with pytest.raises(ValueError, match="--architecture 'x'"):
        SimulationSpec(architecture="x")
