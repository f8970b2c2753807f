"""Speculative decoding: the simulated decode speedup against a scalar expectation formula.

    .venv/bin/python bench/spec_decode.py [--model meta-llama/Llama-3.1-8B] [--gpu H100]
        [--method eagle3|eagle|mtp|draft_model] [--k 3] [--draft-model PATH] [--rates 0.2,0.5,0.8] [--batches 1,4,16,64]
        [--input-len 1024] [--output-len 512] [--predictor-bundle auto]

The paper's Figure 3 compares vLLM's MTP decode speedup with AIConfigurator's analytical one,
which divides a verify step's cost by the expected tokens it commits. This script prints, per
acceptance rate p (each draft accepted with probability p once the one before was: per-position
rates p, p^2, ..., p^k, ``--spec-acceptance-rate p``) and concurrency B (B x 4 random requests
of fixed lengths, all sent at once, ``--max-concurrency B``):

* simulated: mean TPOT without drafts / mean TPOT with them, each a whole simulation (vLLM 0.33's
  scheduler with its verify steps, KV lookahead, per-request acceptance draws, requests finishing
  at different steps, async scheduling), and the mean acceptance length it drew;
* scalar: the same cost model's step time of B decodes at the mean context, times the expected
  tokens a verify commits (1 + p + ... + p^k), over the step time of B verifies of 1 + k tokens
  plus the drafter's k passes: the formula's speedup;
* their ratio (scalar / simulated).

Figures are simulated, not measured: no GPU ran here.
"""

from __future__ import annotations

import argparse
import sys

from calibration.auto_bundle import ensure_bundle
from frontier.gpu import get_gpu
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.engine_args import EngineArgs
from simulator.predictor_cost import make_cost_model
from simulator.simulation import SimulationSpec, resolve_engine, run_simulation
from simulator.spec_decode import SpecDecodeConfig, spec_config_from_vllm
from simulator.workload import WorkloadSpec


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def simulate_tpot_ms(args, spec: SpecDecodeConfig | None, batch: int, bundle: str | None) -> tuple[float, float]:
    """(mean TPOT in ms, mean acceptance length; 1 without drafts) of one simulation."""
    result = run_simulation(SimulationSpec(
        engine=EngineArgs(model=args.model, gpu=args.gpu, speculative_config=spec),
        workload=WorkloadSpec(dataset_name="random", num_prompts=4 * batch, random_input_len=args.input_len,
                              random_output_len=args.output_len, random_range_ratio=0.0, seed=0),
        max_concurrency=batch, predictor_bundle=bundle))
    return result.summary["mean_tpot_ms"], result.summary.get("spec_mean_acceptance_length", 1.0)


def scalar_speedup(args, spec: SpecDecodeConfig, batch: int, bundle: str | None) -> float:
    """The formula's speedup: B decodes' step time x expected committed tokens / (B verifies' step
    time + the drafter's passes), at the requests' mean context."""
    r = resolve_engine(EngineArgs(model=args.model, gpu=args.gpu, speculative_config=spec))
    engine = BatchEngine(r.model, r.parallel, r.gpu, make_cost_model(r.gpu, "analytical", bundle),
                         r.cudagraph_config(), spec=spec, draft_model=r.draft_model)
    k, ctx = spec.num_speculative_tokens, (args.input_len + args.output_len // 2,) * batch
    plain = engine.step_cost(BatchShape((1,) * batch, ctx)).duration_s
    verify = engine.step_cost(BatchShape((1 + k,) * batch, ctx, num_drafts=k * batch, draft_passes=k)).duration_s
    return plain * (1 + sum(spec.acceptance_rates)) / verify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B")
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--method", default="eagle3")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--draft-model", default="", help="the draft head's config.json path (its draft vocabulary); "
                        "with --method draft_model the draft model's catalogue name or config.json path")
    parser.add_argument("--rates", default="0.2,0.5,0.8")
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=512)
    parser.add_argument("--predictor-bundle", default=None, help="auto: the GPU's calibrated bundle; default roofline")
    args = parser.parse_args(argv)
    try:
        rates, batches = _floats(args.rates), [int(b) for b in args.batches.split(",") if b]
    except ValueError:
        parser.error(f"--rates {args.rates!r} / --batches {args.batches!r}: give comma-separated numbers "
                     "(rates in [0, 1], batches >= 1)")
    if not rates or not batches or min(batches) < 1:
        parser.error(f"--batches {args.batches!r}: give comma-separated integers >= 1")
    for flag, value in (("--k", args.k), ("--input-len", args.input_len), ("--output-len", args.output_len)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    try:
        specs = [spec_config_from_vllm({"method": args.method, "num_speculative_tokens": args.k,
                                        "model": args.draft_model}, [p]) for p in rates]
        bundle = str(ensure_bundle(get_gpu(args.gpu).name)) if args.predictor_bundle == "auto" else args.predictor_bundle
        plain = {b: simulate_tpot_ms(args, None, b, bundle)[0] for b in batches}
        print(f"{args.model} on {args.gpu}, {args.method} k={args.k}, {args.input_len} in / {args.output_len} out, "
              f"cost model {'calibrated ' + bundle if bundle else 'roofline'}")
        print(f"{'p':>5} {'B':>4} {'TPOT ms':>8} {'spec ms':>8} {'accept len':>10} {'simulated':>9} {'scalar':>7} "
              f"{'scalar/sim':>10}")
        for p, spec in zip(rates, specs):
            for b in batches:
                tpot, length = simulate_tpot_ms(args, spec, b, bundle)
                sim, scalar = plain[b] / tpot, scalar_speedup(args, spec, b, bundle)
                print(f"{p:5.2f} {b:4d} {plain[b]:8.2f} {tpot:8.2f} {length:10.2f} {sim:8.2f}x {scalar:6.2f}x "
                      f"{scalar / sim:10.3f}")
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
