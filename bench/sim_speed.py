"""Simulation speed: wall time, steps and events per second for a few co-located runs.

    .venv/bin/python bench/sim_speed.py [--num-prompts N]

Prints one line per case: simulated duration, wall time of the event loop, steps per
second of wall time, microseconds per scheduled request-step, and peak RSS of the process.
"""

from __future__ import annotations

import argparse
import resource

from simulator.engine_args import EngineArgs
from simulator.sglang_layout import SglangArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.spec_decode import SpecDecodeConfig
from simulator.workload import WorkloadSpec

CASES = [
    ("llama8b-h100-random-rate20", EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
     dict(dataset_name="random", request_rate=20.0)),
    ("llama8b-h100-random-burst", EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
     dict(dataset_name="random")),
    ("llama8b-4replicas-sharegpt", EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", num_replicas=4),
     dict(dataset_name="sharegpt", request_rate=60.0)),
    ("qwen3-30b-a3b-dp4-ep", EngineArgs(model="Qwen/Qwen3-30B-A3B", gpu="H200", data_parallel_size=4,
                                        enable_expert_parallel=True),
     dict(dataset_name="random", request_rate=40.0)),
    # speculative decoding: the scheduler's per-request path (no lazy decode), drafter priced per step
    ("llama8b-h100-eagle3-rate20", EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100",
                                              speculative_config=SpecDecodeConfig("eagle3", 3, (0.8, 0.6, 0.45))),
     dict(dataset_name="random", request_rate=20.0)),
    # sliding-window layers: the hybrid KV manager (a table per group, per-step slots, no lazy decode)
    ("gpt-oss-120b-h200-rate20", EngineArgs(model="openai/gpt-oss-120b", gpu="H200"),
     dict(dataset_name="random", request_rate=20.0)),
    # Gated DeltaNet hybrid (Qwen3.5) with prefix caching: vLLM's "align" mamba mode (per-group state
    # tables, block-aligned prefill chunks; lazy decode visits at block crossings), then without
    ("qwen3.5-35b-h100-rate20-align", EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", max_model_len=32768),
     dict(dataset_name="random", request_rate=20.0)),
    ("qwen3.5-35b-h100-rate20-none", EngineArgs(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", max_model_len=32768,
                                                    enable_prefix_caching=False),
     dict(dataset_name="random", request_rate=20.0)),
    # SGLang's scheduler mirror (--engine sglang): its radix cache keeps every finished request
    # until a prefill or decode needs the slots; the second case caps the pool so most steps evict
    ("sglang-llama8b-h100-rate20", EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
     dict(dataset_name="random", request_rate=20.0), SglangArgs()),
    ("sglang-llama8b-h100-100k-pool", EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
     dict(dataset_name="random", request_rate=50.0), SglangArgs(max_total_tokens=100_000)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-prompts", type=int, default=2000)
    args = parser.parse_args()
    if args.num_prompts < 1:
        parser.error(f"--num-prompts must be >= 1, got {args.num_prompts}")
    print(f"{'case':<30} {'reqs':>6} {'sim_s':>8} {'wall_s':>7} {'steps':>7} {'steps/s':>8} "
          f"{'us/req-step':>11} {'rss_MiB':>8}")
    for name, engine, wl, *sglang in CASES:
        result = run_simulation(SimulationSpec(engine=engine, workload=WorkloadSpec(
            num_prompts=args.num_prompts, **wl), sglang=sglang[0] if sglang else None))
        steps = result.trace.num_steps()
        req_steps = sum(result.trace.step_cols["num_reqs"])
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:<30} {len(result.records):>6} {result.simulated_duration_s:>8.1f} "
              f"{result.sim_wall_s:>7.2f} {steps:>7} {steps / result.sim_wall_s:>8.0f} "
              f"{1e6 * result.sim_wall_s / max(req_steps, 1):>11.1f} {rss:>8.0f}")


if __name__ == "__main__":
    main()
