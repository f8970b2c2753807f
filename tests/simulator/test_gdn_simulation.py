"""A Gated DeltaNet hybrid (Qwen3.5-35B-A3B) simulated end to end without prefix caching (vLLM's
"none" mamba cache mode): the engine runs on the aligned attention block, and each request in
service holds one state block per GDN group beside its attention blocks; and with prefix caching
(vLLM's default, its "align" mode): states kept at block boundaries, hits on them."""

import dataclasses
import re
from collections import Counter

import pytest

from simulator.engine_args import EngineArgs
from simulator.kv_cache.state import StateKVCacheManager
from simulator.kv_cache.state_align import AlignStateKVCacheManager
from simulator.request import Request, RequestSpec
from simulator.simulation import SimulationSpec, build_memory, resolve_engine, run_simulation
from simulator.spec_decode import spec_config_from_vllm
from simulator.workload import WorkloadSpec


def _run(blocks: int, seed: int = 1):
    args = EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", enable_prefix_caching=False, max_model_len=8192,
                      num_gpu_blocks_override=blocks)
    return run_simulation(SimulationSpec(
        engine=args, workload=WorkloadSpec(dataset_name="random", num_prompts=40, request_rate=100.0,
                                           random_input_len=2000, random_output_len=200, seed=seed), debug=True))


def test_the_engine_runs_on_the_aligned_block_with_state_blocks_per_request():
    args = EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", enable_prefix_caching=False, max_model_len=8192)
    resolved = resolve_engine(args)
    memory = build_memory(resolved)
    assert (resolved.block_size, memory.block_size) == (16, 1056)     # the flag's, then vLLM's alignment
    kv = dataclasses.replace(resolved, block_size=memory.block_size).kv_cache_manager(memory.num_gpu_blocks,
                                                                                       memory.layout)
    assert type(kv) is StateKVCacheManager and (kv.num_state_groups, kv.block_size) == (3, 1056)
    # 16 blocks, 15 usable: a 2,000-token prompt is admitted with 3 state blocks + 2 attention blocks
    # of 1,056 tokens (5; 2 without the state groups), so 3 run at once (7 without), and growing
    # to 2,200 tokens (3 attention blocks) they preempt
    result = _run(16)
    assert result.summary["completed"] == 40 and result.resolved.block_size == 1056
    steps = result.trace.steps_table().to_pydict()
    assert (max(steps["num_reqs"]), max(steps["kv_blocks_used"]), max(steps["num_preempted"])) == (3, 15, 1)
    roomy = _run(40).trace.steps_table().to_pydict()
    assert (max(roomy["num_reqs"]), max(roomy["kv_blocks_used"])) == (7, 39)      # 39 // 5


def test_prefix_caching_runs_the_align_mode_with_hits_on_kept_states():
    """40 requests of a 2,500-token shared prefix + 2,000 own tokens, 1,088-token blocks (the
    attention block aligned to the state and to FlashInfer's 64-token checkpoint grid). The first
    computes its prompt; its GDN groups keep only the state at its replay boundary (3,264 tokens),
    past the shared prefix, so the second hits no state: full attention's hit (2 blocks) becomes
    its junction, its first chunk stops there (2,176 tokens) and that state is kept; the other 38
    hit 2,176 tokens (prefix caching without GDN state would give every request after the first
    2,176, and the "none" mode none)."""
    args = EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", max_model_len=8192, num_gpu_blocks_override=16)
    resolved = resolve_engine(args)
    memory = build_memory(resolved)
    kv = dataclasses.replace(resolved, block_size=memory.block_size).kv_cache_manager(memory.num_gpu_blocks,
                                                                                       memory.layout)
    assert type(kv) is AlignStateKVCacheManager and (kv.num_state_groups, kv.block_size) == (3, 1088)
    result = run_simulation(SimulationSpec(
        engine=args, workload=WorkloadSpec(dataset_name="random", num_prompts=40, request_rate=100.0,
                                           random_input_len=2000, random_output_len=200, random_prefix_len=2500,
                                           seed=1), debug=True))
    assert result.summary["completed"] == 40 and result.resolved.block_size == 1088
    assert Counter(r.num_prefix_hit_tokens for r in result.records) == {2176: 38, 0: 2}
    # vLLM's counters: every admission's prompt tokens looked up, the hit ones
    assert (result.summary["prefix_cache_queries"], result.summary["prefix_cache_hits"]) == (40 * 4500, 38 * 2176)
    assert result.summary["prefix_cache_hit_rate"] == 38 * 2176 / (40 * 4500)
    steps = result.trace.steps_table().to_pydict()
    # one request at a time (a 4,500-token prompt holds up to 14 of the 15 usable blocks): the
    # first prompt whole, the junction chunk, then the other prompts' 2,324 uncached tokens
    assert Counter(n for n in steps["num_tokens"] if n > 1) == {4500: 1, 2176: 1, 2324: 39}
    assert (max(steps["num_reqs"]), max(steps["kv_blocks_used"])) == (1, 14)


def test_an_mtp_drafter_adds_speculative_state_blocks_in_both_modes():
    """--speculative-config method mtp (the checkpoint's MTP layer, 2 drafts): the layer joins the
    full-attention group (11 layers), the conv state holds 2 more rows (2,179,072 bytes a layer:
    1,072-token blocks without prefix caching, 1,088 with), and each GDN group holds 2 more state
    blocks a request. A 2,000-token prompt's first slots (2 attention blocks): with prefix caching
    4 a group (state, prefill checkpoint, 2 speculative), without 3 (state, 2 speculative)."""
    spec = spec_config_from_vllm({"method": "mtp", "num_speculative_tokens": 2}, [0.8, 0.6])
    for caching, block, per_group in ((True, 1088, 4), (False, 1072, 3)):
        args = EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", max_model_len=8192, enable_prefix_caching=caching,
                          num_gpu_blocks_override=40, speculative_config=spec)
        resolved = resolve_engine(args)
        memory = build_memory(resolved)
        layout = memory.layout
        assert (memory.block_size, layout.mamba_state_bytes, layout.mamba_blocks_per_request) == \
            (block, 2_179_072, 5 if caching else 3)
        assert sorted((g.kind, len(g.layers)) for g in layout.groups) == [("full", 11)] + [("mamba", 10)] * 3
        resolved = dataclasses.replace(resolved, block_size=memory.block_size)
        kv = resolved.kv_cache_manager(memory.num_gpu_blocks, layout)
        request = Request.from_spec(RequestSpec("a", 0.0, 2000, 10), block)
        assert len(kv.allocate_slots(request, 2000, num_lookahead_tokens=2)) == 3 * per_group + 2
        result = run_simulation(SimulationSpec(engine=args, workload=WorkloadSpec(
            dataset_name="random", num_prompts=40, request_rate=100.0, random_input_len=2000, random_output_len=200,
            seed=1), debug=True))
        assert result.summary["completed"] == 40 and result.resolved.block_size == block
    for flags, message in (({"speculative_config": spec_config_from_vllm({"method": "eagle3", "num_speculative_tokens": 2},
                                                                          [0.8])},
                            "method 'eagle3' with Qwen/Qwen3.5-35B-A3B's Gated DeltaNet layers is not simulated"),
                           ({"speculative_config": spec, "pipeline_parallel_size": 2},
                            "--speculative-config with pipeline parallelism on Qwen/Qwen3.5-35B-A3B's Gated DeltaNet")):
        with pytest.raises(ValueError, match=re.escape(message)):
            resolve_engine(EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", max_model_len=8192, **flags))
