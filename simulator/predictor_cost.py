"""Calibrated operator costs: a bundle's per-family predictors behind the ``CostModel`` protocol.

``PredictorCostModel`` prices GEMMs (family ``linear``), attention, MoE and elementwise
ops (norms, RoPE, activation) with the predictors of a calibration bundle
(``calibration.bundle.load_bundle``; the simulator only queries, it never fits).
Everything the bundle cannot price goes to the roofline model and is counted, never
silently mixed in:

* ops of a family the bundle has no predictor for (e.g. elementwise in bundles
  imported from AIConfigurator, and collectives, which the communication model
  in ``simulator.comm`` prices);
* elementwise ops no profiled kernel stands for (embedding, sampler: NaN);
* ops whose sub-model is missing (e.g. a dtype without measured rows: NaN).

Queries outside the training range are priced by the predictor (trees do not
extrapolate) and flagged: ``num_out_of_range`` counts them and the summary
reports it, as DESIGN.md asks.
"""

from __future__ import annotations

import math
from typing import Sequence

from frontier.gpu import GpuSpec
from frontier.ops import OpSpec
from simulator.comm.backend import make_comm_backend
from simulator.cost_model import CostModel, RooflineCostModel

PREDICTED_FAMILIES = ("linear", "attention", "moe", "elementwise")


class PredictorCostModel:
    """Bundle predictors for linear/attention/MoE/elementwise ops; roofline (+ comm model) for the rest."""

    def __init__(self, bundle, fallback: RooflineCostModel) -> None:
        self.bundle = bundle
        self.fallback = fallback
        self.name = f"calibrated ({bundle.manifest.get('gpu')}, {bundle.manifest.get('framework', 'vllm')} " \
                    f"{bundle.manifest.get('framework_version', '')})".replace(" )", ")")
        self._predictors = {f: bundle.predictors[f] for f in PREDICTED_FAMILIES if f in bundle.predictors}
        for predictor in bundle.predictors.values():   # a shared bundle: memos of one simulation at a time
            predictor.reset_cache()
        self.num_predicted = 0
        self.num_out_of_range = 0
        self.num_fallback = 0

    def op_times_s(self, ops: Sequence[OpSpec], timing_mode: str) -> list[float]:
        times = [0.0] * len(ops)
        by_family: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            by_family.setdefault(op.family, []).append(i)
        rest: list[int] = []
        for family, idx in by_family.items():
            predictor = self._predictors.get(family)
            if predictor is None:
                rest += idx
                continue
            pred, oor = predictor.predict_s([ops[i] for i in idx], timing_mode, return_mask=True)
            for j, i in enumerate(idx):
                t = float(pred[j])
                if math.isnan(t) or t <= 0.0:
                    rest.append(i)
                    continue
                times[i] = t
                self.num_predicted += 1
                self.num_out_of_range += bool(oor[j])
        if rest:
            fb = self.fallback.op_times_s([ops[i] for i in rest], timing_mode)
            for i, t in zip(rest, fb):
                times[i] = t
            self.num_fallback += len(rest)
        return times

    def stats(self) -> dict[str, int | str]:
        """Query counts for the summary (distinct op shapes: queries are memoized per step shape)."""
        return {"cost_model": self.name, "cost_queries_predicted": self.num_predicted,
                "cost_queries_out_of_range": self.num_out_of_range,
                "cost_queries_roofline": self.num_fallback}


def make_cost_model(gpu: GpuSpec, comm_model: str, predictor_bundle: str | None) -> CostModel:
    """Roofline (no bundle) or a calibrated bundle, both with the chosen communication model."""
    roofline = RooflineCostModel(gpu, make_comm_backend(comm_model, gpu))
    if predictor_bundle is None:
        return roofline
    from calibration.bundle import shared_bundle
    bundle = shared_bundle(predictor_bundle)   # loaded once per process; memos start empty per model
    bundle_gpu = str(bundle.manifest.get("gpu", ""))
    if bundle_gpu and bundle_gpu.lower() != gpu.name.lower():
        raise ValueError(f"--predictor-bundle {predictor_bundle} was fitted on {bundle_gpu}, "
                         f"not {gpu.name}; calibrate one for {gpu.name} or use --predictor-bundle auto")
    return PredictorCostModel(bundle, roofline)


def cost_model_stats(cost_model: CostModel) -> dict[str, int | str]:
    """Summary keys naming the cost model and, for a bundle, how its queries were answered."""
    if isinstance(cost_model, PredictorCostModel):
        return cost_model.stats()
    return {"cost_model": cost_model.name}
