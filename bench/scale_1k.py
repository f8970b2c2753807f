"""Scale: a 1,024-GPU deployment serving 100,000 requests, timed on a CPU.

    .venv/bin/python bench/scale_1k.py [--num-prompts N] [--request-rate R] [--case pdd|afd|all]
                                       [--profile OUT.prof] [--predictor-bundle auto|PATH]

Cases (H100, roofline costs unless ``--predictor-bundle``, random dataset 1024 in / 256 out,
Poisson arrivals):
* ``pdd-llama70b``: meta-llama/Llama-3.1-70B, prefill TP4 x 128 engines (512 GPUs) + decode
  TP8 x 64 engines (512 GPUs) = 1,024 GPUs; least-loaded prefill, kv_aware decode routing.
  (1024-token prompts make prefill the bottleneck: 64 prefill engines saturate at ~920 req/s
  with TTFT in seconds while 96 decode engines idle at 8.6 ms TPOT, so half the GPUs prefill.)
* ``afd-qwen3-235b``: Qwen/Qwen3-235B-A22B, prefill TP8 x 32 (256 GPUs) + attention TP4 x 64
  (256) + FFN EP8 x 64 (512; EP4 would hold 106 GiB of experts per GPU) = 1,024 GPUs
  (simulator/afd.py).

Prints per case: requests, simulated duration, wall time of the event loop and of the whole
run (compile + summary), CPU time of the run (wall time inflates on a busy machine), the
real-time factors (simulated / wall and simulated / CPU time), steps and peak RSS
(``resource.getrusage``; the process maximum so far, so run one case for its own figure).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import resource
import time

from simulator.control_plane import PddSpec, RoleLayout
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def _workload(num_prompts: int, rate: float) -> WorkloadSpec:
    """Both cases: random 1024 in / 256 out, range ratio 0.5, Poisson arrivals at `rate` req/s."""
    return WorkloadSpec(num_prompts=num_prompts, request_rate=rate, dataset_name="random",
                        random_input_len=1024, random_output_len=256, random_range_ratio=0.5)


def pdd_llama70b(num_prompts: int, rate: float) -> SimulationSpec:
    return SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-3.1-70B", gpu="H100", max_model_len=4096),
        workload=_workload(num_prompts, rate),
        architecture="pdd",
        pdd=PddSpec(prefill=RoleLayout("prefill", tp=4, replicas=128, router="least_loaded"),
                    decode=RoleLayout("decode", tp=8, replicas=64, router="kv_aware")))


def afd_qwen3_235b(num_prompts: int, rate: float) -> SimulationSpec:
    from simulator.afd import AfdRole, AfdSpec
    return SimulationSpec(
        engine=EngineArgs(model="Qwen/Qwen3-235B-A22B", gpu="H100", max_model_len=4096),
        workload=_workload(num_prompts, rate),
        architecture="afd",
        pdd=PddSpec(prefill=RoleLayout("prefill", tp=8, replicas=32, router="least_loaded")),
        afd=AfdSpec(attention=AfdRole("attention", tp=4, replicas=64), ffn=AfdRole("ffn", ep=8, replicas=64)))


CASES = {"pdd": ("pdd-llama70b", pdd_llama70b, 1000.0), "afd": ("afd-qwen3-235b", afd_qwen3_235b, 1000.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-prompts", type=int, default=100_000)
    parser.add_argument("--request-rate", type=float, default=None, help="default: the case's rate")
    parser.add_argument("--case", choices=("pdd", "afd", "all"), default="all")
    parser.add_argument("--profile", default=None, help="write cProfile stats of the run here")
    parser.add_argument("--predictor-bundle", default=None,
                        help="calibrated costs: a bundle path or auto (the cached H100 bundle); default roofline")
    args = parser.parse_args()
    if args.num_prompts < 1:
        parser.error(f"--num-prompts must be >= 1, got {args.num_prompts}")
    if args.request_rate is not None and not args.request_rate > 0:
        parser.error(f"--request-rate must be > 0, got {args.request_rate}")
    names = ("pdd", "afd") if args.case == "all" else (args.case,)
    print(f"{'case':<16} {'gpus':>5} {'reqs':>7} {'failed':>6} {'sim_s':>7} {'loop_s':>7} {'wall_s':>7} "
          f"{'cpu_s':>7} {'x_real':>6} {'x_cpu':>6} {'steps':>8} {'req/s':>7} {'tpot_ms':>7} {'ttft_ms':>8} "
          f"{'rss_MiB':>7}")
    for key in names:
        name, make, rate = CASES[key]
        try:
            spec = make(args.num_prompts, args.request_rate or rate)
        except ImportError as exc:
            print(f"{name:<16} TODO: not run ({exc})")
            continue
        if args.predictor_bundle:
            from calibration.auto_bundle import ensure_bundle
            bundle = ensure_bundle(spec.engine.gpu) if args.predictor_bundle == "auto" else args.predictor_bundle
            spec = dataclasses.replace(spec, predictor_bundle=str(bundle))
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if args.profile:
            prof = cProfile.Profile()
            result = prof.runcall(run_simulation, spec)
            prof.dump_stats(args.profile if len(names) == 1 else f"{args.profile}.{key}")
        else:
            result = run_simulation(spec)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        s = result.summary
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:<16} {s.get('num_gpus', 0):>5} {s.get('completed', 0):>7} {s['failed']:>6} "
              f"{result.simulated_duration_s:>7.1f} {result.sim_wall_s:>7.1f} {wall:>7.1f} {cpu:>7.1f} "
              f"{result.simulated_duration_s / wall:>6.2f} {result.simulated_duration_s / cpu:>6.2f} "
              f"{result.trace.num_steps():>8} "
              f"{s.get('request_throughput', 0):>7.0f} {s.get('mean_tpot_ms', 0):>7.1f} "
              f"{s.get('mean_ttft_ms', 0):>8.0f} {rss:>7.0f}", flush=True)


if __name__ == "__main__":
    main()
