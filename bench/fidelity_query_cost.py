"""Per-query cost of the fidelity plane inside a simulation (calibrated bundle vs a raw forest call).

    .venv/bin/python bench/fidelity_query_cost.py [--gpu H100] [--num-prompts 1000]

Uses the auto bundle of ``--gpu`` (fitted and cached on first use). Prints:
* the time of one raw random-forest ``predict`` on a single feature row (what a naive
  simulator would pay per operator query);
* inside a simulation: steps priced, operator queries issued by the batch engine, wall time spent
  in the cost model, and the amortized microseconds per step and per operator query.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from calibration.auto_bundle import ensure_bundle
from calibration.bundle import load_bundle
from simulator import predictor_cost
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def raw_forest_call_s(bundle) -> float:
    """Median wall time of one sklearn predict() on one row of the linear family's first model."""
    pred = bundle.predictors["linear"]
    model = next(iter(pred.models.values()))
    row = np.zeros((1, model.n_features_in_))
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        model.predict(row)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--num-prompts", type=int, default=1000)
    args = parser.parse_args()
    path = ensure_bundle(args.gpu, log=print)
    print(f"raw forest predict, one row: {1e6 * raw_forest_call_s(load_bundle(path)):.0f} us")

    calls = {"n": 0, "ops": 0, "s": 0.0}
    original = predictor_cost.PredictorCostModel.op_times_s

    def timed(self, ops, timing_mode):
        t0 = time.perf_counter()
        out = original(self, ops, timing_mode)
        calls["s"] += time.perf_counter() - t0
        calls["n"] += 1
        calls["ops"] += len(ops)
        return out

    predictor_cost.PredictorCostModel.op_times_s = timed
    result = run_simulation(SimulationSpec(
        engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu=args.gpu),
        workload=WorkloadSpec(dataset_name="random", num_prompts=args.num_prompts, request_rate=20.0,
                              random_range_ratio=0.5),
        predictor_bundle=str(path)))
    steps = result.trace.num_steps()
    print(f"simulation: {steps} steps, {calls['n']} cost-model calls, {calls['ops']} operator queries, "
          f"{result.sim_wall_s:.2f} s loop wall time, {calls['s']:.2f} s in the cost model")
    print(f"amortized: {1e6 * calls['s'] / max(steps, 1):.1f} us per step, "
          f"{1e6 * calls['s'] / max(calls['ops'], 1):.1f} us per operator query issued")


if __name__ == "__main__":
    main()
