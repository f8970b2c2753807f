"""Per-query cost of the fidelity plane inside a simulation (calibrated bundle vs a raw forest call).

    .venv/bin/python bench/fidelity_query_cost.py [--gpu H100] [--num-prompts 1000]
        [--model meta-llama/Llama-3.1-8B] [--runs 2] [--grid-study]

Uses the auto bundle of ``--gpu`` (fitted and cached on first use). Prints:
* the time of the model's batch ``predict`` on a single feature row (the compiled numpy
  lockstep: the bundle stores its forests compiled; sklearn's own ``predict``, what a naive
  simulator would pay per operator query, took 533-1078 us on these forests when measured) and
  of the compiled single-row walk (``calibration.predictors.tree_eval``) on the same row, both
  for the linear family's first model and the attention family's first model;
* inside a simulation: steps priced, operator queries issued by the batch engine, the
  predictors' memo lookups and hit rate (token-table families, GEMM and elementwise: a hit
  is a query whose block of TABLE_BLOCK token counts was already tabulated), wall time spent
  in the cost model, and the amortized microseconds per step and per operator query (wall,
  and CPU time of this process, which a busy shared machine inflates less), in all, and per
  family (wall time per ``price_op`` call: the per-op timer costs less than ``process_time``,
  and the figures in all include it); for each of ``--runs`` simulations in one process (workload seeds 0, 1, ...): the
  first starts with empty memos, the later ones find the memos the runs before left, as the
  simulations of a sweep over one model and bundle do (memos are shared and change no price);
* with ``--grid-study``: for the attention (and MoE) queries of those simulations, the memo hit rate and
  the error the grid adds, |price(grid) / price(~unquantized statistics) - 1| (p50, p95, max),
  per candidate grid (cells per log2 unit of the rows' statistics); the figures behind
  ``QUERY_CELLS`` in ``calibration/predictors/attention_query.py`` and ``moe_query.py`` (GEMM
  tables are exact: no grid).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from calibration.auto_bundle import ensure_bundle
from calibration.bundle import load_bundle
from calibration.predictors import base
from calibration.predictors.base import SCALAR_QUERIES
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from simulator import predictor_cost
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def one_row_costs_s(predictor) -> tuple[float, float]:
    """(the model's ``predict``, the compiled single-row walk) median seconds on one in-range row
    of the first model. A bundle stores its forests compiled, so ``predict`` is the compiled
    numpy lockstep; sklearn's own ``predict`` on these forests (~0.5-1 ms a call, measured
    2026-11-30 on the sklearn objects) is not available from the bundle."""
    mkey = next(iter(predictor.models))
    model = predictor.models[mkey]
    lo, hi = predictor.ranges[mkey]
    row = ((lo + hi) / 2)[None, :]
    compiled = predictor._compiled_for(mkey)[0]
    x = row[0].tolist()
    raw, fast = [], []
    for _ in range(50):
        t0 = time.perf_counter()
        model.predict(row)
        t1 = time.perf_counter()
        compiled.predict_row(x)
        t2 = time.perf_counter()
        raw.append(t1 - t0)
        fast.append(t2 - t1)
    return float(np.median(raw)), float(np.median(fast))


def grid_study(bundle, calls: list, family: str) -> None:
    """Print memo hit rate and added error per candidate grid over the family's recorded queries
    (cells per log2 unit of the rows' statistics, the query module's ``QUERY_CELLS``)."""
    query, pred = SCALAR_QUERIES[family], bundle.predictors[family]
    ops = [(sel, mode) for sel, mode in
           (([op for op in batch if op.family == family], mode) for batch, mode in calls) if sel]
    original = query.QUERY_CELLS

    def price(cells):
        query.QUERY_CELLS = cells
        pred.reset_cache()
        out = np.concatenate([pred.predict_s(sel, mode) for sel, mode in ops])
        return out, pred.memo_lookups, pred.memo_misses

    try:
        exact, rows, _ = price(2.0 ** 30)     # ~unquantized statistics
        ok = np.isfinite(exact)
        print(f"grid study, {family}: {len(exact)} queries, {rows} memo rows")
        for cells in (64.0, 32.0, 16.0, 8.0):
            got, lookups, misses = price(cells)
            err = 100 * np.abs(got[ok] / exact[ok] - 1)
            print(f"  1/{cells:<4g} hit {100 * (lookups - misses) / lookups:5.1f} %, added error "
                  f"p50 {np.percentile(err, 50):.2f} % p95 {np.percentile(err, 95):.2f} % max {err.max():.2f} %")
    finally:
        query.QUERY_CELLS = original
        pred.reset_cache()      # cells are keyed by grid index: forget those of the candidate grids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B")
    parser.add_argument("--grid-study", action="store_true")
    parser.add_argument("--runs", type=int, default=2,
                        help="simulations in one process (workload seeds 0, 1, ...): the first starts with "
                             "empty memos, the later ones reuse them, as the runs of a sweep do")
    args = parser.parse_args()
    for flag, value in (("--runs", args.runs), ("--num-prompts", args.num_prompts)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    try:
        load_model_spec(args.model)                 # an unknown model or GPU: one line, not a traceback
        path = ensure_bundle(get_gpu(args.gpu).name, log=print)
    except ValueError as exc:
        parser.error(str(exc))
    bundle = load_bundle(path)
    for family in ("linear", "attention"):
        raw, fast = one_row_costs_s(bundle.predictors[family])
        print(f"{family} model, one row: batch predict {1e6 * raw:.0f} us, single-row walk {1e6 * fast:.1f} us")

    calls: dict = {}
    per_family: dict[str, list] = {}    # family -> [queries, CPU seconds]
    original = predictor_cost.PredictorCostModel.op_times_s
    models: list = []
    recorded: list = []
    compiles = {"n": 0, "s": 0.0}
    compile_forest = base.compile_forest

    def timed_compile(model):
        t0 = time.perf_counter()
        out = compile_forest(model)
        compiles["s"] += time.perf_counter() - t0
        compiles["n"] += 1
        return out

    base.compile_forest = timed_compile

    def timed(self, ops, timing_mode):
        if not models:
            models.append(self)
        if args.grid_study:
            recorded.append((list(ops), timing_mode))
        t0, c0 = time.perf_counter(), time.process_time()
        out = original(self, ops, timing_mode)
        calls["s"] += time.perf_counter() - t0
        calls["cpu"] += time.process_time() - c0
        calls["n"] += 1
        calls["ops"] += len(ops)
        return out

    predictor_cost.PredictorCostModel.op_times_s = timed
    price_op = base.FamilyPredictor.price_op

    def family_timed(self, op, timing_mode):     # perf_counter: cheaper than process_time, per op
        t0 = time.perf_counter()
        out = price_op(self, op, timing_mode)
        acc = per_family.setdefault(self.family, [0, 0.0])
        acc[0] += 1
        acc[1] += time.perf_counter() - t0
        return out

    base.FamilyPredictor.price_op = family_timed
    for seed in range(args.runs):
        calls.update(n=0, ops=0, s=0.0, cpu=0.0)
        compiles.update(n=0, s=0.0)
        per_family.clear()
        models.clear()
        result = run_simulation(SimulationSpec(
            engine=EngineArgs(model=args.model, gpu=args.gpu),
            workload=WorkloadSpec(dataset_name="random", num_prompts=args.num_prompts, request_rate=20.0,
                                  random_range_ratio=0.5, seed=seed),
            predictor_bundle=str(path)))
        steps, n = result.trace.num_steps(), max(calls["ops"], 1)
        memo = "cold memos" if seed == 0 else "memos of the runs before (a sweep)"
        print(f"run {seed + 1} (workload seed {seed}, {memo}): {steps} steps, {calls['n']} cost-model calls, "
              f"{calls['ops']} operator queries, {result.sim_wall_s:.2f} s loop wall time, {calls['s']:.3f} s in "
              f"the cost model, of which {compiles['s']:.3f} s compiling {compiles['n']} sub-models")
        for family, pred in models[0]._predictors.items() if models else ():
            if pred.memo_lookups:
                hits = pred.memo_lookups - pred.memo_misses
                queries, seconds = per_family.get(family, (0, 0.0))
                evaluated = (f"{pred.memo_misses} blocks tabulated ({pred.table_rows} token counts)"
                             if family in base.TOKEN_TABLES else f"{pred.memo_misses} model evaluations")
                print(f"  {family}: {pred.memo_lookups} memo lookups, {hits} hits "
                      f"({100 * hits / pred.memo_lookups:.1f} %), {evaluated}; "
                      f"{1e6 * seconds / max(queries, 1):.1f} us per query (wall) incl. compiling")
        print(f"  amortized: {1e6 * calls['s'] / max(steps, 1):.1f} us per step, {1e6 * calls['s'] / n:.1f} us per "
              f"operator query issued (CPU: {1e6 * calls['cpu'] / max(steps, 1):.1f} us per step, "
              f"{1e6 * calls['cpu'] / n:.1f} us per query); without compiling: "
              f"{1e6 * (calls['s'] - compiles['s']) / n:.1f} us per query")
    if args.grid_study:
        for family in SCALAR_QUERIES:
            if any(op.family == family for batch, _ in recorded for op in batch):
                grid_study(bundle, recorded, family)


if __name__ == "__main__":
    main()
