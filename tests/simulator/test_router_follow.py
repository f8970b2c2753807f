"""least_loaded router: kept loads (``follow``) pick exactly what polling every replica picks;
kv_aware router: free blocks read from the pools pick what calling every replica picks."""

import random

import pytest

from simulator.control_plane import PddSpec, RoleLayout
from simulator.engine_args import EngineArgs
from simulator.router import KvAwareRouter, LeastLoadedRouter
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


class _Replica:
    def __init__(self) -> None:
        self.load = 0

    def num_unfinished(self) -> int:
        return self.load


@pytest.mark.parametrize("seed", range(10))
def test_kept_loads_pick_as_polling_on_random_picks_and_finishes(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 9)
    replicas = [_Replica() for _ in range(n)]
    for r in replicas:
        r.load = rng.randint(0, 3)
    polling, kept = LeastLoadedRouter(n), LeastLoadedRouter(n)
    kept.follow(replicas, verify=True)
    for _ in range(300):
        if rng.random() < 0.5:
            i = polling.pick(replicas)
            assert kept.pick(replicas) == i
            replicas[i].load += 1
        else:
            i = rng.randrange(n)
            k = rng.randint(0, replicas[i].load)
            replicas[i].load -= k
            kept.finished(i, k)


def test_verify_raises_when_a_finish_is_not_reported():
    replicas = [_Replica(), _Replica()]
    router = LeastLoadedRouter(2)
    router.follow(replicas, verify=True)
    replicas[router.pick(replicas)].load += 1
    replicas[0].load -= 1                   # finished, not reported
    with pytest.raises(AssertionError, match="kept loads \\[1, 0\\] != polled \\[0, 0\\]"):
        router.pick(replicas)


def _records(spec: SimulationSpec, follow: bool, monkeypatch) -> list[tuple]:
    with monkeypatch.context() as m:
        if not follow:
            m.setattr(LeastLoadedRouter, "follow", lambda self, replicas, verify=False: None)
            m.setattr(KvAwareRouter, "read_free_blocks", lambda self, queues, verify=False: None)
        result = run_simulation(spec)
    return [(r.request_id, r.prefill_replica, r.decode_replica, r.first_token_s, r.finish_s,
             r.num_preemptions) for r in result.records]


@pytest.mark.parametrize("engine, pdd, blocks", [
    (dict(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096),
     PddSpec(RoleLayout("prefill", replicas=3, router="least_loaded"),
             RoleLayout("decode", replicas=3, router="kv_aware")), None),
    (dict(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096),   # small KV: preemptions
     PddSpec(RoleLayout("prefill", replicas=3, router="least_loaded"),
             RoleLayout("decode", replicas=2, router="kv_aware")), 120),
    (dict(model="Qwen/Qwen3-30B-A3B", gpu="H200", max_model_len=4096, enable_expert_parallel=True),
     PddSpec(RoleLayout("prefill", dp=2, replicas=2, router="least_loaded"), RoleLayout("decode", dp=2)), None),
])
def test_pdd_runs_pick_the_same_replicas_with_kept_loads_and_read_free_blocks(engine, pdd, blocks, monkeypatch):
    spec = SimulationSpec(
        engine=EngineArgs(**engine, num_gpu_blocks_override=blocks), architecture="pdd", pdd=pdd, debug=True,
        workload=WorkloadSpec(num_prompts=60, request_rate=400.0, burstiness=0.3, random_input_len=700,
                              random_output_len=12, random_range_ratio=0.9))
    kept = _records(spec, True, monkeypatch)      # debug: every pick also polls and compares
    assert kept == _records(spec, False, monkeypatch)
    assert len({r[1] for r in kept}) > 1 and len({r[2] for r in kept}) > 1
    if blocks is not None:
        assert any(r[5] for r in kept)


class _Queue:
    def __init__(self, free: int) -> None:
        self.num_free_blocks = free


class _DecodeReplica:
    def __init__(self, queue: _Queue) -> None:
        self.queue = queue

    def num_free_kv_blocks(self) -> int:
        return self.queue.num_free_blocks


def test_read_free_blocks_pick_as_calling_and_verify_catches_a_wrong_queue():
    rng = random.Random(7)
    queues = [_Queue(rng.randint(0, 5)) for _ in range(6)]
    replicas = [_DecodeReplica(q) for q in queues]
    calling, reading = KvAwareRouter(6), KvAwareRouter(6)
    reading.read_free_blocks(queues, verify=True)
    for _ in range(200):
        assert reading.pick(replicas) == calling.pick(replicas)
        rng.choice(queues).num_free_blocks = rng.randint(0, 5)
    wrong = KvAwareRouter(2)
    wrong.read_free_blocks([_Queue(1), _Queue(2)], verify=True)
    with pytest.raises(AssertionError, match="read free blocks \\[1, 2\\] != polled"):
        wrong.pick(replicas)
