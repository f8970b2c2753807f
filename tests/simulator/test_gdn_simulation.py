"""A Gated DeltaNet hybrid (Qwen3.5-35B-A3B) simulated end to end without prefix caching (vLLM's
"none" mamba cache mode): the engine runs on the aligned attention block, and each request in
service holds one state block per GDN group beside its attention blocks."""

import dataclasses

from simulator.engine_args import EngineArgs
from simulator.kv_cache.state import StateKVCacheManager
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
