"""Lazy decode (`Scheduler.enable_lazy_decode`) gives exactly what the per-request path gives.

Two schedulers fed the same requests, one lazy, one not, must plan the same steps (every
`SchedulerOutput` field), finish the same requests in the same order, keep the same KV state
(block tables, free-queue order, prefix-cache map) and, once materialised (`sync_lazy`), hold
the same request fields and token times. Whole simulations (co-located with preemption and
prefix sharing, P/D, lockstep DP, AFD) give identical records, summaries and batch traces.
"""

from __future__ import annotations

import random
from array import array
from collections import deque

import pytest

from simulator.control_plane import PddSpec, RoleLayout
from simulator.engine_args import EngineArgs
from simulator.kv_cache.hybrid import HybridKVCacheManager
from simulator.kv_cache.manager import KVCacheManager
from simulator.kv_cache.state_align import AlignStateKVCacheManager
from simulator.memory import max_in_flight_tokens
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.scheduler_trace import STATE_ALIGN
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec

FIELDS = ("status", "num_computed_tokens", "num_output_tokens", "num_output_placeholders",
          "num_in_flight_tokens", "num_stale_output_tokens", "is_prefill_chunk", "kv_num_blocks",
          "kv_num_cached_blocks", "num_preemptions", "num_cached_tokens", "last_sched_seq",
          "drop_stale_output", "block_hashes")


def _kv_state(s: Scheduler) -> tuple:
    pool = s.kv.pool
    if isinstance(s.kv, HybridKVCacheManager):
        tables = [dict(t) for t in s.kv.tables]
    elif isinstance(s.kv, AlignStateKVCacheManager):
        tables = [dict(t) for t in s.kv.state_tables] + [dict(s.kv.req_to_blocks), dict(s.kv.retired)]
    else:
        tables = dict(s.kv.req_to_blocks)
    return (tables, pool.free_queue.order(), list(pool.ref_cnt), dict(pool.cached),
            list(pool.block_hash), list(s.kv.deferred_frees))


def _drive(seed: int, lazy: bool, *, async_scheduling: bool, caching: bool, chunked: bool,
           num_blocks: int, steps: int, kv_role: str | None = None, kv_groups: tuple[int, ...] = ()):
    """Run one scheduler on a random workload (shared prefixes, arrivals over time); return what
    must match: per-step outputs and finishes, KV states, final request fields and token times.
    ``kv_groups``: hybrid KV groups (``scheduler_trace.make_scheduler``'s: W > 0 sliding, -C chunked)."""
    rng = random.Random(seed)
    max_len = 512
    budget = rng.choice([64, 256, 2048]) if chunked else max_len
    cfg = SchedulerConfig(max_num_seqs=rng.choice([4, 8, 64]), max_num_batched_tokens=budget,
                          max_model_len=max_len, long_prefill_token_threshold=rng.choice([0, 0, 48]),
                          async_scheduling=async_scheduling, enable_chunked_prefill=chunked)
    if STATE_ALIGN in kv_groups:
        kv = AlignStateKVCacheManager(num_blocks, 16, max_len, len(kv_groups) - 1)
    elif kv_groups:
        kv = HybridKVCacheManager(num_blocks, 16, max_len, tuple(abs(w) for w in kv_groups),
                                  max_in_flight_tokens(budget, 1, async_scheduling), enable_prefix_caching=caching,
                                  chunked=any(w < 0 for w in kv_groups))
    else:
        kv = KVCacheManager(num_blocks, 16, max_len, enable_prefix_caching=caching)
    s = Scheduler(cfg, kv, kv_role=kv_role)
    assert s.enable_lazy_decode() if lazy else True
    prefixes = [tuple(rng.randrange(50) for _ in range(rng.choice([16, 40, 64]))) for _ in range(3)]
    reqs, log, now = {}, [], 0.0
    times: dict[str, array] = {}
    n = 0

    def add() -> None:
        nonlocal n
        p = rng.choice(prefixes) if rng.random() < 0.6 else ()
        tail = tuple(rng.randrange(50) for _ in range(rng.randint(1, 120)))
        ids = (p + tail)[:max_len - 1]
        spec = RequestSpec(f"r{n}", now, len(ids), rng.choice([1, 2, 5, 17, 40, 90, 300]),
                           prompt_token_ids=ids if rng.random() < 0.8 else None)
        n += 1
        r = s.add_request(spec, remote_decode=kv_role == "producer",
                          remote_prefill=kv_role == "consumer" and rng.random() < 0.8)
        r.token_times_s = times[spec.request_id] = array("d", bytes(8 * spec.output_len))
        reqs[spec.request_id] = r

    for _ in range(rng.randint(1, 6)):
        add()
    queue: deque = deque()
    depth = 2 if async_scheduling else 1
    pulls: list[str] = []                           # consumer: KV pulls in flight
    for step in range(steps):
        if rng.random() < 0.15:
            add()
        if not s.has_requests() and not queue:
            add()
        for rid in [q for q in pulls if rng.random() < 0.5]:    # pulls land after a while
            pulls.remove(rid)
            s.finish_remote_kv(rid)
        out = s.schedule()
        pulls += out.remote_kv_request_ids
        log.append(("out", out, [r.request_id for r in out.requests]))
        queue.appendleft(out)
        if len(queue) < depth:
            continue
        now += 0.01 * rng.randint(1, 3)
        res = s.update_from_output(queue.pop(), now)
        for r in res.token_requests:               # the client: time of each eager token
            r.token_times_s[r.num_output_tokens - 1] = now
        log.append(("upd", res.first_token_request_ids, res.finished_request_ids))
        if kv_role == "producer":
            for rid in res.finished_request_ids:
                s.finish_sending_kv(rid)
        log.append(("kv", _kv_state(s)))
        if step % 97 == 50:                        # materialising mid-run changes nothing
            s.sync_lazy()
    s.sync_lazy()
    fields = {rid: tuple(getattr(r, f) for f in FIELDS) for rid, r in reqs.items()}
    return log, fields, {rid: list(t) for rid, t in times.items()}


def assert_same_run(exact, lazy) -> None:
    """A lazy and a per-request `_drive` gave the same log (step by step, so the first difference
    shows), fields and token times."""
    for a, b in zip(exact[0], lazy[0]):
        assert a == b
    assert len(exact[0]) == len(lazy[0])
    assert lazy[1] == exact[1]
    assert lazy[2] == exact[2]


CASES = [
    dict(async_scheduling=True, caching=True, chunked=True),
    dict(async_scheduling=False, caching=True, chunked=True),
    dict(async_scheduling=True, caching=False, chunked=True),
    dict(async_scheduling=True, caching=True, chunked=False),
    dict(async_scheduling=False, caching=False, chunked=False),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("case", CASES)
def test_lazy_scheduler_equals_exact_step_for_step(case, seed):
    num_blocks = random.Random(seed).choice([48, 80, 400])      # small pools preempt
    exact = _drive(seed, False, num_blocks=num_blocks, steps=700, **case)
    lazy = _drive(seed, True, num_blocks=num_blocks, steps=700, **case)
    assert_same_run(exact, lazy)


HYBRID = [(48, 0), (0, 32), (64, 64, 64, 0), (40,), (-64, 0), (0, -128, -128)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kv_groups", HYBRID, ids=str)
@pytest.mark.parametrize("case", CASES[:3] + CASES[4:])
def test_lazy_hybrid_scheduler_equals_exact_step_for_step(case, kv_groups, seed):
    """Sliding-window and chunked KV groups: a lazy decode's window frees happen at the steps the
    per-request path frees them (visits woken when the step moving the window is processed)."""
    num_blocks = random.Random(seed).choice([60, 120, 400]) * len(kv_groups)
    exact = _drive(seed, False, num_blocks=num_blocks, steps=500, kv_groups=kv_groups, **case)
    lazy = _drive(seed, True, num_blocks=num_blocks, steps=500, kv_groups=kv_groups, **case)
    assert_same_run(exact, lazy)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_lazy_align_state_scheduler_equals_exact(seed, async_scheduling):
    """Gated DeltaNet groups in vLLM's "align" mode (prefix caching): a lazy decode takes its
    state blocks and frees the one behind it at the steps the per-request path does."""
    groups = (STATE_ALIGN,) * 3 + (0,)
    num_blocks = random.Random(seed).choice([40, 60, 400])      # small pools preempt
    case = dict(async_scheduling=async_scheduling, caching=True, chunked=True, kv_groups=groups)
    exact = _drive(seed, False, num_blocks=num_blocks, steps=600, **case)
    lazy = _drive(seed, True, num_blocks=num_blocks, steps=600, **case)
    assert_same_run(exact, lazy)
    assert any(p for entry in exact[0] if entry[0] == "out" for p in entry[1].preempted_request_ids) \
        or num_blocks == 400, "a small pool that never preempts"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kv_groups", [(48, 0), (-64, -64, 0)], ids=str)
def test_lazy_hybrid_consumer_equals_exact(seed, kv_groups):
    case = dict(async_scheduling=seed % 2 == 0, caching=seed < 2, chunked=True)
    num_blocks = random.Random(seed).choice([60, 120, 400]) * len(kv_groups)
    exact = _drive(seed, False, num_blocks=num_blocks, steps=500, kv_role="consumer", kv_groups=kv_groups, **case)
    lazy = _drive(seed, True, num_blocks=num_blocks, steps=500, kv_role="consumer", kv_groups=kv_groups, **case)
    assert lazy == exact


def test_lazy_hybrid_requests_skip_steps_and_get_window_frees():
    """A lazy decode of a sliding-window model frees its out-of-window blocks while it stays lazy:
    window 48, 16-token blocks, 20 prompt tokens (step 1), then a token a step; async: schedule()
    of step s sees steps <= s - 2 processed, 20 + (s - 3) tokens; block k is freed once
    processed - 47 >= 16 (k + 1): block 0 at step 46, block 1 at step 62."""
    kv = HybridKVCacheManager(400, 16, 512, (48, 0), max_in_flight_tokens(8192, 1, True))
    s = Scheduler(SchedulerConfig(max_model_len=512), kv)
    assert s.enable_lazy_decode()
    r = s.add_request(RequestSpec("a", 0.0, 20, 100))
    pending = deque([s.schedule()])
    for step in range(2, 63):
        pending.append(s.schedule())
        s.update_from_output(pending.popleft(), float(step))
        if step == 2:
            assert (r.lazy_start, r.lazy_end) == (2, 100)
    assert r.lazy_end and r.num_computed_tokens == 20          # still lazy: its fields not advanced
    assert kv.nulls["a"] == (20 + 62 - 3 - 47) // 16 == 2         # step 62: 79 tokens processed
    assert kv.tables[0]["a"][:2] == [kv.pool.null_block] * 2 and kv.pool.null_block not in kv.tables[1]["a"]


def test_lazy_producer_and_workloads_that_never_go_lazy_are_unchanged():
    exact = _drive(3, False, num_blocks=120, steps=300, kv_role="producer", **CASES[0])
    lazy = _drive(3, True, num_blocks=120, steps=300, kv_role="producer", **CASES[0])
    assert lazy == exact


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_lazy_consumer_equals_exact(seed, async_scheduling):
    """P/D decode side: remote-prefill admissions, KV pulls landing at random, deferred frees
    (async) and preemption of lazy requests in small pools."""
    case = dict(async_scheduling=async_scheduling, caching=seed % 2 == 0, chunked=True)
    num_blocks = random.Random(seed).choice([48, 80, 400])
    exact = _drive(seed, False, num_blocks=num_blocks, steps=600, kv_role="consumer", **case)
    lazy = _drive(seed, True, num_blocks=num_blocks, steps=600, kv_role="consumer", **case)
    for a, b in zip(exact[0], lazy[0]):
        assert a == b
    assert lazy == exact
    assert any(f[FIELDS.index("num_preemptions")] > 0 for f in exact[1].values()) or num_blocks == 400


def test_lazy_decode_actually_skips_requests_and_preempts():
    """The random workloads above exercise the lazy path and preemption (else they prove little)."""
    log, fields, _ = _drive(1, True, num_blocks=48, steps=700, **CASES[0])
    assert any(f[FIELDS.index("num_preemptions")] > 0 for f in fields.values())
    s = Scheduler(SchedulerConfig(max_model_len=512), KVCacheManager(400, 16, 512))
    s.enable_lazy_decode()
    r = s.add_request(RequestSpec("a", 0.0, 20, 100))
    s.update_from_output(s.schedule(), 1.0)         # step 1: the prompt, first token
    out2 = s.schedule()                             # step 2: c0 = 20, joins until its last token:
    assert (r.lazy_start, r.lazy_end) == (2, 100)   # 98 steps (token 100 would be step 100's)
    out3 = s.schedule()
    assert out3.context_lens == (21,) and r.num_computed_tokens == 20   # listed, not advanced
    assert s.update_from_output(out2, 2.0).token_request_ids == ()      # lazy: skipped
    s.sync_lazy()
    assert (r.num_computed_tokens, r.num_output_tokens, r.num_output_placeholders) == (22, 2, 1)
    assert r.lazy_end == 0
    assert s.update_from_output(out3, 3.0).token_request_ids == ("a",)  # materialised: processed
    assert r.num_output_tokens == 3


def test_lazy_needs_the_time_and_is_off_where_it_cannot_be_exact():
    s = Scheduler(SchedulerConfig(max_model_len=512), KVCacheManager(400, 16, 512))
    s.enable_lazy_decode()
    s.add_request(RequestSpec("a", 0.0, 20, 5))
    with pytest.raises(ValueError, match="needs the time"):
        s.update_from_output(s.schedule())
    prio = Scheduler(SchedulerConfig(max_model_len=512, policy="priority"), KVCacheManager(400, 16, 512))
    assert prio.enable_lazy_decode() is False
    pp = Scheduler(SchedulerConfig(max_model_len=512, pipeline_parallel_size=2), KVCacheManager(400, 16, 512))
    assert pp.enable_lazy_decode() is False
    late = Scheduler(SchedulerConfig(max_model_len=512), KVCacheManager(400, 16, 512))
    late.add_request(RequestSpec("a", 0.0, 20, 5))
    late.schedule()
    with pytest.raises(ValueError, match=r"enable_lazy_decode\(\) after 1 schedule\(\) calls"):
        late.enable_lazy_decode()


# ---------------------------------------------------------------------------- whole simulations
def _run(spec: SimulationSpec, monkeypatch, lazy: bool):
    if not lazy:
        monkeypatch.setattr(Scheduler, "enable_lazy_decode", lambda self: False)
    res = run_simulation(spec)
    monkeypatch.undo()
    recs = [(r.request_id, r.send_s, r.first_token_s, r.finish_s, r.output_len, r.num_preemptions,
             r.num_prefix_hit_tokens, r.prefill_replica, r.decode_replica, r.kv_transfer_s,
             list(r.token_times_s)) for r in res.records]
    summary = {k: v for k, v in res.summary.items() if k != "sim_wall_s"}
    return recs, summary, res.trace.step_cols, res.trace.req_cols


SMALL = dict(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=2048)
MOE = dict(model="Qwen/Qwen3-30B-A3B", gpu="H200", max_model_len=4096, enable_expert_parallel=True)
SPECS = {
    "colocated-preempt-prefix": SimulationSpec(
        engine=EngineArgs(**SMALL, num_gpu_blocks_override=300, num_replicas=2),
        workload=WorkloadSpec(num_prompts=60, request_rate=30.0, random_input_len=300, random_output_len=120,
                              random_range_ratio=0.5, random_prefix_len=64), keep_batch_trace=True),
    "colocated-sync-chunked": SimulationSpec(
        engine=EngineArgs(**SMALL, async_scheduling=False, max_num_batched_tokens=256, max_num_seqs=64,
                          long_prefill_token_threshold=64, num_gpu_blocks_override=400),
        workload=WorkloadSpec(num_prompts=40, request_rate=20.0, random_input_len=400, random_output_len=80,
                              random_range_ratio=0.5), keep_batch_trace=True, max_concurrency=12),
    "pdd": SimulationSpec(
        engine=EngineArgs(**SMALL), architecture="pdd", keep_batch_trace=True,
        pdd=PddSpec(RoleLayout("prefill", replicas=2), RoleLayout("decode", replicas=2, router="kv_aware")),
        workload=WorkloadSpec(num_prompts=50, request_rate=40.0, random_input_len=300, random_output_len=100,
                              random_range_ratio=0.5)),
    # sliding-window and chunked KV groups (HybridKVCacheManager): frees while lazy
    "hybrid-gpt-oss-preempt-prefix": SimulationSpec(
        engine=EngineArgs(model="openai/gpt-oss-20b", gpu="H100", max_model_len=2048, num_gpu_blocks_override=400),
        workload=WorkloadSpec(num_prompts=60, request_rate=30.0, random_input_len=300, random_output_len=150,
                              random_range_ratio=0.5, random_prefix_len=64), keep_batch_trace=True),
    # decodes crossing the 8,192-token chunk boundary free the chunk's blocks while lazy
    "hybrid-llama4-chunked-pdd": SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-4-Scout-17B-16E-Instruct", gpu="H100", tensor_parallel_size=4,
                          max_model_len=20000),
        architecture="pdd", keep_batch_trace=True,
        workload=WorkloadSpec(num_prompts=30, request_rate=20.0, random_input_len=8150, random_output_len=120,
                              random_range_ratio=0.02)),
    "pdd-lockstep-moe": SimulationSpec(
        engine=EngineArgs(**MOE), architecture="pdd", keep_batch_trace=True,
        pdd=PddSpec(RoleLayout("prefill", dp=2), RoleLayout("decode", dp=2, replicas=2, router="kv_aware")),
        workload=WorkloadSpec(num_prompts=30, request_rate=30.0, random_input_len=300, random_output_len=60,
                              random_range_ratio=0.5)),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_simulation_lazy_equals_exact(name, monkeypatch):
    exact = _run(SPECS[name], monkeypatch, lazy=False)
    lazy = _run(SPECS[name], monkeypatch, lazy=True)
    assert lazy[0] == exact[0]
    assert lazy[1] == exact[1]
    assert lazy[2] == exact[2]
    assert lazy[3] == exact[3]
    assert len(exact[0]) > 0 and sum(r[4] for r in exact[0]) > 1000
