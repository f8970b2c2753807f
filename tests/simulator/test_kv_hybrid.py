"""Golden tests of the hybrid KV cache (full + sliding-window groups over one pool), values as
vLLM 0.33's HybridKVCacheCoordinator gives them (tests/oracle/test_hybrid_parity.py checks whole
schedules against vLLM itself)."""

import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from simulator.engine_args import EngineArgs
from simulator.kv_cache.hybrid import HybridKVCacheManager
from simulator.kv_cache.manager import KVCacheManager
from simulator.memory import kv_layout
from test_kv_cache import admit, req      # the scheduler's admission, a 16-token-block request


def test_a_sliding_group_frees_the_blocks_before_its_window():
    # window 32 (group 0, as gpt-oss's first layer), full attention (group 1)
    kv = HybridKVCacheManager(40, 16, 1024, (32, 0), max_in_flight_tokens=64, enable_prefix_caching=False)
    a = req("a", 100)
    # first chunk of 64 tokens: 4 blocks per group, the sliding group's first
    assert admit(kv, a, 64) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert kv.num_free_blocks == 31
    # next chunk: 64 tokens processed, the window of token 64 starts at 33: blocks 0-1 are freed
    # (tail first, unhashed: to the head) and reused before fresh ones
    assert kv.allocate_slots(a, 36) == [2, 1, 9, 10, 11, 12]
    assert kv.tables[0]["a"] == [0, 0, 3, 4, 2, 1, 9]
    assert kv.tables[1]["a"] == [5, 6, 7, 8, 10, 11, 12]
    assert kv.num_free_blocks == 27
    kv.free(a)
    # group by group, each table tail first; unhashed blocks go to the queue's head in that order,
    # so the full group's (freed last) are reused first
    assert kv.pool.free_queue.order() == [12, 11, 10, 8, 7, 6, 5, 9, 1, 2, 4, 3] + list(range(13, 40))
    kv.check_invariants()


def test_in_flight_tokens_are_not_freed_yet():
    kv = HybridKVCacheManager(40, 16, 1024, (32, 0), max_in_flight_tokens=128, enable_prefix_caching=False)
    a = req("a", 200)
    admit(kv, a, 64)
    a.num_in_flight_tokens = 64         # async: the first chunk's step is not processed yet
    kv.allocate_slots(a, 64)
    assert kv.tables[0]["a"][:2] == [1, 2]          # nothing freed: 0 tokens processed
    a.num_computed_tokens, a.num_in_flight_tokens = 128, 64
    kv.allocate_slots(a, 16)
    assert kv.tables[0]["a"][:3] == [0, 0, 3]       # 64 processed: blocks 0-1 left the window


def test_the_admission_gate_caps_the_sliding_group():
    # prompt 1000: the full group needs 63 blocks, the sliding group min(63, cap),
    # cap = ceil(min(32 - 1 + 64, 1024) / 16) + 1 = 7: 70 blocks
    for num_gpu_blocks, fits in ((70, False), (71, True)):
        kv = HybridKVCacheManager(num_gpu_blocks, 16, 1024, (32, 0), max_in_flight_tokens=64,
                                  enable_prefix_caching=False)
        got = kv.allocate_slots(req("a", 1000), 64, full_sequence_must_fit=True, has_scheduled_reqs=False)
        assert (got is not None) == fits


def test_remaining_blocks_cap_the_sliding_group_and_deferred_frees_go_group_by_group():
    kv = HybridKVCacheManager(200, 16, 1024, (32, 0), max_in_flight_tokens=64, enable_prefix_caching=False)
    a = req("a", 1000)
    assert admit(kv, a, 64) == [1, 2, 3, 4, 5, 6, 7, 8]
    # the in-flight reservation (vLLM _request_remaining_blocks): full 63 - 4, sliding min(63, 7) - 4
    assert kv.remaining_blocks(a) == 59 + 3
    kv.defer_free(a, fence_seq=3)
    assert kv.num_free_blocks == 199 - 8 and kv.deferred_frees[0] == (3, [1, 2, 3, 4, 5, 6, 7, 8])
    kv.drain_deferred_frees(3)
    # vLLM pop_blocks_for_free: one list of every group's blocks, freed tail first
    assert kv.pool.free_queue.order()[:8] == [8, 7, 6, 5, 4, 3, 2, 1]
    kv.check_invariants()


def test_sparse_retention_and_the_shared_prefix_junction():
    kv = HybridKVCacheManager(60, 16, 1024, (32, 0), max_in_flight_tokens=64)
    prompt = tuple(range(1, 101))
    a = req("a", 100, prompt)
    admit(kv, a)
    # the full group hashes its 6 full blocks; the sliding group only the 2 (= ceil(31 / 16))
    # blocks that end at the replay boundary (token 99: blocks 4-5)
    cached = [i for i, b in enumerate(kv.tables[0]["a"]) if kv.pool.block_hash[b] is not None]
    assert cached == [4, 5]
    blocks, hit = kv.get_computed_blocks(req("b", 100, prompt))
    assert hit == 96 and blocks[0][:4] == [0, 0, 0, 0] and len(blocks[1]) == 6
    # a prompt sharing 50 tokens: the full group hits 48, the sliding group nothing there, so no
    # hit, and 48 becomes the request's junction: its sliding blocks 1-2 get cached
    shared = prompt[:50] + tuple(range(1000, 1050))
    c = req("c", 100, shared)
    assert admit(kv, c) and kv.junction["c"] == 48 and c.num_computed_tokens == 100
    d = req("d", 100, shared[:50] + tuple(range(2000, 2050)))
    assert kv.get_computed_blocks(d)[1] == 48
    kv.check_invariants()


def resolved(model: str):
    return EngineArgs(model=model, gpu="H100").resolve(load_model_spec(model), get_gpu("H100"))


def test_gpt_oss_gets_the_hybrid_manager_and_llama_one_group():
    oss = resolved("openai/gpt-oss-120b")
    kv = oss.kv_cache_manager(1000, kv_layout(oss.model, oss.parallel, oss.block_size))
    assert isinstance(kv, HybridKVCacheManager) and kv.group_windows == (128, 0)
    # budget 8192 tokens, async scheduling: 2 x 8192 in flight; ceil((128 - 1 + 16384) / 16) + 1
    assert kv.admission_cap == 1033
    assert type(oss.kv_cache_manager(1000)) is KVCacheManager          # no layout: P/D, AFD roles
    llama = resolved("meta-llama/Llama-3.1-8B")
    assert type(llama.kv_cache_manager(1000, kv_layout(llama.model, llama.parallel, llama.block_size))) \
        is KVCacheManager


def test_bad_groups_are_refused():
    with pytest.raises(ValueError, match="one sliding window"):
        HybridKVCacheManager(40, 16, 1024, (0, 0), max_in_flight_tokens=64)
    with pytest.raises(ValueError, match="one sliding window"):
        HybridKVCacheManager(40, 16, 1024, (32, 64, 0), max_in_flight_tokens=64)


def test_a_pull_moves_the_sliding_layers_window_only():
    """gpt-oss-120b TP1 both sides: 2 x 8 KV heads x 64 x 2 bytes = 2,048 bytes per token and
    layer; 18 full and 18 sliding layers. D holds the 128-token window's blocks only: of a
    1,000-token prompt, tokens 864.. (blocks from (1000 - 127) // 16 = 54)."""
    from types import SimpleNamespace

    from simulator.control_plane import KvPull, kv_pull
    oss = resolved("openai/gpt-oss-120b")
    layout = kv_layout(oss.model, oss.parallel, oss.block_size)
    role = SimpleNamespace(resolved=oss, memory=SimpleNamespace(layout=layout))
    pull = kv_pull(oss.model, role, role)
    assert pull == KvPull(18 * 2048, 18 * 2048, 128, 16)
    assert pull.num_bytes(0, 1000) == (1000 + 136) * 18 * 2048
    assert pull.num_bytes(960, 1000) == (40 + 40) * 18 * 2048      # D's local hit is not pulled
    unified = SimpleNamespace(resolved=oss, memory=SimpleNamespace(
        layout=kv_layout(oss.model, oss.parallel, oss.block_size, hybrid=False)))
    assert kv_pull(oss.model, unified, unified).num_bytes(0, 1000) == 1000 * 36 * 2048


def test_a_pull_moves_the_chunked_layers_last_chunk_only():
    """Llama-4-Scout TP4 both sides: 2 x 2 KV heads x 128 x 2 bytes = 1,024 bytes per token and
    layer; 12 full (NoPE) and 36 chunked layers. D holds the blocks of the last 8,192-token chunk
    only: of a 10,000-token prompt, tokens 8,192.. (1,808 tokens)."""
    from types import SimpleNamespace

    from frontier.gpu import get_gpu
    from frontier.model_spec import load_model_spec
    from simulator.control_plane import KvPull, kv_pull
    from simulator.engine_args import EngineArgs
    name = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    scout = EngineArgs(model=name, gpu="H100", tensor_parallel_size=4, max_model_len=32768).resolve(
        load_model_spec(name), get_gpu("H100"))
    layout = kv_layout(scout.model, scout.parallel, scout.block_size)
    role = SimpleNamespace(resolved=scout, memory=SimpleNamespace(layout=layout))
    pull = kv_pull(scout.model, role, role)
    assert pull == KvPull(12 * 1024, 36 * 1024, 8192, 16, True)
    assert pull.num_bytes(0, 10000) == 10000 * 12 * 1024 + 1808 * 36 * 1024
    assert pull.num_bytes(0, 8000) == 8000 * 48 * 1024          # within the first chunk: every layer
    assert type(scout.kv_cache_manager(5000, layout)) is HybridKVCacheManager
    assert scout.kv_cache_manager(5000, layout).group_windows == (8192, 8192, 8192, 0)


def test_chunked_local_attention_runs_piecewise_graphs():
    # vLLM's chunked local-attention backend supports no CUDA graph (from 0.11): the default
    # FULL_AND_PIECEWISE falls back to PIECEWISE, FULL is refused; 0.10 kept FULL decode graphs
    from frontier.gpu import get_gpu
    from frontier.model_spec import load_model_spec
    name = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    model, gpu = load_model_spec(name), get_gpu("H100")

    def resolve(**kw):
        return EngineArgs(model=name, gpu="H100", tensor_parallel_size=4, max_model_len=32768, **kw).resolve(model, gpu)

    assert resolve().cudagraph_mode == "PIECEWISE" and resolve().cudagraph_config().full_sizes == ()
    assert resolve(vllm_version="0.10.2").cudagraph_mode == "FULL_AND_PIECEWISE"
    assert resolve(cudagraph_mode="NONE").cudagraph_mode == "NONE"
    with pytest.raises(ValueError, match="cudagraph_mode FULL is not supported"):
        resolve(cudagraph_mode="FULL").cudagraph_mode
    assert resolved("meta-llama/Llama-3.1-8B").cudagraph_mode == "FULL_AND_PIECEWISE"
