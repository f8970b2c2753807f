"""A Gated DeltaNet hybrid (Qwen3.5-35B-A3B) simulated end to end without prefix caching (vLLM's
"none" mamba cache mode): the engine runs on the aligned attention block, and each request in
service holds one state block per GDN group beside its attention blocks; and with prefix caching
(vLLM's default, its "align" mode): states kept at block boundaries, hits on them."""

import dataclasses
from collections import Counter

from simulator.engine_args import EngineArgs
from simulator.kv_cache.state import StateKVCacheManager
from simulator.kv_cache.state_align import AlignStateKVCacheManager
from simulator.simulation import SimulationSpec, build_memory, resolve_engine, run_simulation
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
    steps = result.trace.steps_table().to_pydict()
    # one request at a time (a 4,500-token prompt holds up to 14 of the 15 usable blocks): the
    # first prompt whole, the junction chunk, then the other prompts' 2,324 uncached tokens
    assert Counter(n for n in steps["num_tokens"] if n > 1) == {4500: 1, 2176: 1, 2324: 39}
    assert (max(steps["num_reqs"]), max(steps["kv_blocks_used"])) == (1, 14)
