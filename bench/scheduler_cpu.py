"""CPU time of vLLM's own scheduler per step, measured by running vLLM 0.33's ``Scheduler`` on
this CPU (the test oracle: ``scripts/install_oracle.sh``), beside what the engine-CPU model
charges (``simulator.engine_cpu.MEASURED``, fitted on Sarathi-Serve's 2024 A100-host times).

    .venv/bin/python bench/scheduler_cpu.py [--batch-sizes 1,8,32,64,128,256,512] [--steps 200]
        [--async-scheduling] [--prefix-caching] [--json]

For each batch size N: N requests (128 prompt tokens, outputs longer than the run) are admitted
and prefilled, then ``--steps`` decode steps of all N are timed: ``Scheduler.schedule()`` and
``update_from_output()`` with a model output of one sampled token per request (the oracle's fake
runner), ``time.perf_counter`` around each call, no GPU. Prints the median microseconds per step
of each call, of both and of both per request, Sarathi-Serve's ``schedule_median`` (Vidur's
``cpu_overheads.csv``, Llama-2-7b, 1 GPU) at the batch sizes it has, when
``../shared/datasets/vidur`` is present, and what ``EngineCpu`` charges a step of N requests.

What this does not time: the model runner's input preparation and the sampler's host work
(GPU-side code of vLLM), the output processing of the API server process and the IPC between
the two: the rest of what ``EngineCpu`` stands for. The figures are this machine's CPU, not a
GPU server's host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIDUR_CPU = ROOT.parent / "shared" / "datasets" / "vidur" / "legacy" / "6d98aa8" / "data" / "profiling" / "a100" / \
    "cpu_overheads.csv"
PROMPT_LEN = 128
BLOCK_SIZE = 16


def _driver():
    sys.path.insert(0, str(ROOT / "tests" / "oracle"))
    import vllm_driver      # noqa: E402 — needs vLLM (the oracle install)
    return vllm_driver


def time_steps(batch: int, steps: int, async_scheduling: bool, prefix_caching: bool) -> dict[str, float]:
    """Median microseconds of schedule(), update_from_output() and both, over ``steps`` decode
    steps of ``batch`` running requests."""
    from simulator.request import RequestSpec

    d = _driver()
    output_len = steps + 64
    max_len = PROMPT_LEN + output_len
    sched, hasher = d.new_scheduler(
        max_num_seqs=batch, max_num_batched_tokens=max(batch, min(8192, batch * max_len)), max_model_len=max_len,
        block_size=BLOCK_SIZE, num_gpu_blocks=batch * (-(-max_len // BLOCK_SIZE)) + 1,
        enable_prefix_caching=prefix_caching, long_prefill_token_threshold=0, policy="fcfs",
        async_scheduling=async_scheduling, watermark=0.0)
    d.add_requests(sched, [RequestSpec(f"r{i:05d}", 0.0, PROMPT_LEN, output_len) for i in range(batch)], hasher)
    queue: list = []
    t_sched, t_update = [], []
    while True:                       # admit and prefill everything, then time decode steps
        t0 = time.perf_counter()
        out = sched.schedule()
        t1 = time.perf_counter()
        sampled = d._fake_sample(sched, out)
        decoding = all(n == 1 for n in out.num_scheduled_tokens.values()) and len(out.num_scheduled_tokens) == batch
        queue.append((sampled, out))
        if async_scheduling and len(queue) < 2:
            continue
        sampled, old = queue.pop(0)
        t2 = time.perf_counter()
        sched.update_from_output(old, sampled)
        t3 = time.perf_counter()
        if decoding:
            t_sched.append(t1 - t0)
            t_update.append(t3 - t2)
            if len(t_sched) == steps:
                break
    us = 1e6
    return {"batch": batch, "schedule_us": us * statistics.median(t_sched), "update_us": us * statistics.median(t_update),
            "step_us": us * statistics.median(a + b for a, b in zip(t_sched, t_update))}


def vidur_schedule_ms() -> dict[int, float]:
    """Sarathi-Serve's median schedule() ms per batch size (Llama-2-7b, 1 GPU), if the data is here."""
    if not VIDUR_CPU.is_file():
        return {}
    import pandas as pd
    df = pd.read_csv(VIDUR_CPU)
    rows = df[(df.model_name == "meta-llama/Llama-2-7b-hf") & (df.tensor_parallel_degree == 1)]
    return {int(b): float(g.schedule_median.median()) for b, g in rows.groupby("batch_size")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="1,8,32,64,128,256,512")
    ap.add_argument("--steps", type=int, default=200, help="decode steps timed per batch size")
    ap.add_argument("--async-scheduling", action="store_true", help="vLLM's AsyncScheduler (default: Scheduler)")
    ap.add_argument("--prefix-caching", action="store_true", help="block hashing on (vLLM's default; off here)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(f"error: --batch-sizes {args.batch_sizes!r}: give comma-separated integers >= 1", file=sys.stderr)
        return 2
    if args.steps < 1:
        print(f"error: --steps {args.steps}: give an integer >= 1", file=sys.stderr)
        return 2
    try:
        _driver()
    except ImportError as exc:
        print(f"error: vLLM's scheduler is not importable ({exc}); run scripts/install_oracle.sh", file=sys.stderr)
        return 2
    from simulator.engine_cpu import MEASURED
    rows = [time_steps(n, args.steps, args.async_scheduling, args.prefix_caching) for n in sizes]
    vidur = vidur_schedule_ms()
    if args.json:
        print(json.dumps({"rows": rows, "vidur_schedule_ms": vidur}, indent=1))
        return 0
    kind = "AsyncScheduler" if args.async_scheduling else "Scheduler"
    print(f"vLLM 0.33 {kind} on this CPU, decode steps ({args.steps} timed per size; prefix caching "
          f"{'on' if args.prefix_caching else 'off'}), median us per step:")
    print("  requests  schedule()  update_from_output()     both  per request | Sarathi-Serve schedule() | "
          "EngineCpu (all CPU work)")
    for r in rows:
        v = vidur.get(r["batch"])
        print(f"  {r['batch']:8d}  {r['schedule_us']:10.1f}  {r['update_us']:20.1f}  {r['step_us']:7.1f}  "
              f"{r['step_us'] / r['batch']:11.2f} | {'' if v is None else f'{1e3 * v:.1f}':>24} | "
              f"{1e6 * MEASURED.step_s(r['batch']):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
