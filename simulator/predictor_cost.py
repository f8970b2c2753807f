"""Calibrated operator costs: a bundle's per-family predictors behind the ``CostModel`` protocol.

``PredictorCostModel`` prices GEMMs (family ``linear``), attention, MoE, elementwise
ops (norms, RoPE, activation) and Gated DeltaNet's kernels (``gdn``: the gated delta rule and the
conv1d, a mixed batch's prefill and decode kernels priced apart and summed; a bundle without the
kernel's sub-model leaves the op to the roofline) and vision towers' attention (``encoder_attention``)
with the predictors of a calibration bundle
(``calibration.bundle.load_bundle``; the simulator only queries, it never fits).
Everything the bundle cannot price goes to the roofline model and is counted, never
silently mixed in:

* ops of a family the bundle has no predictor for (e.g. elementwise in bundles
  imported from AIConfigurator, and collectives, which the communication model
  in ``simulator.comm`` prices);
* elementwise ops no profiled kernel stands for (embedding, sampler: NaN);
* ops whose sub-model is missing (e.g. a dtype without measured rows: NaN; AIC times
  no fp32 GEMM, so MiniMax-M2's fp32 router goes to the roofline).

Queries outside the training range are priced by the predictor (trees do not
extrapolate) and flagged: ``num_out_of_range`` counts them and the summary
reports it, as DESIGN.md asks.

Two op -> table rules follow what the measured rows contain, not the op's name alone:

* **MLA is priced from its pieces, not from module rows.** AIC's MLA tables time the
  whole attention layer (q/kv projections, norms, RoPE, the MLA kernel, the output
  projection). When the bundle's attention predictor was fitted on such rows
  (``module_keys`` with an "mla:" key), the engine's MLA attention op goes to the roofline
  (the MLA kernel alone) and its projection, norm and RoPE ops are priced as the ops they
  are (GEMM rows, ...). The module rows carry a floor the deployments do not pay: ~65-120 us
  per layer at 1-16 heads and batch 1-4 (H200, vLLM 0.24), about twice their pieces (Kimi-K2.5
  tp8, 16 decodes at 2k context: 103 us against GEMM rows 33 us + the MLA kernel 22 us), while
  Kimi-K2.5's measured TPOT at concurrency 4 (10.4 ms for 61 layers) leaves ~61 us per layer
  for MLA once the rest of the step is priced. Kimi's 45 silicon rows (bench/silicon_e2e.py,
  auto): TPOT MAPE 26.6 -> 12.5 % (bias +23 -> +7 %), TTFT of its InferenceMAX rows unchanged
  (24.1 %). The module rows stay in the bundle (``frontier evaluate`` reports them) and price
  nothing. Before 2026-11-30 they priced the MLA op and the projections cost 0 s; before that
  the projections were counted twice.
* **Block-scaled fp8 GEMMs** are priced from the per-tensor fp8 sub-model of the same
  shape (``FP8_BLOCK_AS = "fp8"``) when the bundle has one. AIC's vLLM 0.24 fp8_block
  GEMM table (H200) has a floor of ~57-60 us at m <= 16 and ~80-90 us at m = 32-1024 on
  every shape, which the fp8 rows of the same shapes do not (7-15 us; median
  fp8_block / fp8 ratio 6.05 at m <= 16, 1.04 at m > 4096); a decode step of
  MiniMax-M2.5 (62 layers x 2 fp8_block GEMMs) paid ~7 ms of it, and the measured
  deployments show no such floor (roofline TPOT bias -16 %, calibrated +42 %). The H100
  table (35,704 fp8_block rows: DeepGEMM, FlashInfer, Cutlass) has the same floor (median
  fp8_block / fp8 5.82 at m <= 16, 0.98 at m > 4096), and the same rule applies there.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

from frontier.gpu import GpuSpec
from frontier.ops import GemmOp, OpSpec
from simulator.comm.backend import make_comm_backend
from simulator.cost_model import CostModel, RooflineCostModel

PREDICTED_FAMILIES = ("linear", "attention", "moe", "elementwise", "gdn", "encoder_attention")
FP8_BLOCK_AS = "fp8"   # the GEMM sub-model block-scaled fp8 GEMMs are priced from (see above)


class PredictorCostModel:
    """Bundle predictors for linear/attention/MoE/elementwise/GDN ops; roofline (+ comm model) for the rest."""

    def __init__(self, bundle, fallback: RooflineCostModel) -> None:
        self.bundle = bundle
        self.fallback = fallback
        self._predictors = {f: bundle.predictors[f] for f in PREDICTED_FAMILIES if f in bundle.predictors}
        self.float16_twin_families = tuple(f for f, p in self._predictors.items() if _fp16_without_bf16(p))
        twins = (f"; bf16 ops priced from fp16 rows: {', '.join(self.float16_twin_families)}"
                 if self.float16_twin_families else "")
        from calibration.bundle import source_label    # loaded with the bundle already
        self.name = f"calibrated ({bundle.manifest.get('gpu')}, {source_label(bundle.manifest)}{twins})"
        attention = self._predictors.get("attention")
        self.mla_module = any(str(k).startswith("mla:") for k in getattr(attention, "module_keys", ()))
        linear = self._predictors.get("linear")
        self.fp8_block_as_fp8 = linear is not None and any(k == FP8_BLOCK_AS for _, k in linear.models)
        for predictor in bundle.predictors.values():   # a shared bundle: its memos serve every simulation
            predictor.reset_counters()
        self.num_predicted = 0
        self.num_out_of_range = 0
        self.num_fallback = 0

    def op_times_s(self, ops: Sequence[OpSpec], timing_mode: str) -> list[float]:
        times = [0.0] * len(ops)
        rest: list[int] = []
        predictors = self._predictors
        for i, op in enumerate(ops):
            family = op.family
            predictor = predictors.get(family)
            if predictor is None or (family == "attention" and self.mla_module and op.is_mla):
                rest.append(i)    # MLA under module rows: the kernel alone; its projections are their own ops
                continue
            if family == "moe" and not op.gated:     # no table times a non-gated fused MoE (relu2 experts)
                rest.append(i)
                continue
            if family == "linear" and self.fp8_block_as_fp8:
                op = as_per_tensor_fp8(op)
            if family == "gdn":     # no per-op query path: ops priced by value (memoized), kernel by kernel
                priced = predictor.price_ops(op.kernel_parts(), timing_mode)
                t, oor = sum(p for p, _ in priced), any(o for _, o in priced)
            elif family == "encoder_attention":     # by value (memoized), one uniform batch per image length
                priced = predictor.price_ops(op.uniform_parts(), timing_mode)
                t, oor = sum(p for p, _ in priced), any(o for _, o in priced)
            else:
                t, oor = predictor.price_op(op, timing_mode)
            if math.isnan(t) or t <= 0.0:
                rest.append(i)
                continue
            times[i] = t
            self.num_predicted += 1
            self.num_out_of_range += oor
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


def _fp16_without_bf16(predictor) -> bool:
    """Whether a predictor's sub-models name fp16 and never bf16: the simulator's bf16 ops are
    then priced from the fp16 ones (``calibration.predictors.base.float16_twin``; e.g. a bundle
    fitted on Vidur's profiles)."""
    dtypes = {part for _, key in predictor.models for part in str(key).split(":")}
    return "fp16" in dtypes and "bf16" not in dtypes


@functools.lru_cache(maxsize=1 << 16)
def as_per_tensor_fp8(op: GemmOp) -> GemmOp:
    """A block-scaled fp8 GEMM (fp8 compute, > 1 weight byte per parameter with its scales)
    as the per-tensor fp8 GEMM of the same shape (1 byte per parameter); other ops unchanged.
    Cached per op (a simulation repeats its GEMM shapes every step): ``dataclasses.replace``
    costs ~4 us a call, a cache hit ~0.4 us."""
    if op.compute_dtype == "fp8" and op.weight_bytes_per_param > 1.0:
        return dataclasses.replace(op, weight_bytes_per_param=1.0)
    return op


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
    """Summary keys naming the cost model and, for a bundle, how its queries were answered; with
    measured comm tables (``--comm-model calibrated``), how many collectives they did not cover."""
    from simulator.comm.calibrated import CalibratedCommBackend
    if isinstance(cost_model, PredictorCostModel):
        out, roofline = cost_model.stats(), cost_model.fallback
    else:
        out, roofline = {"cost_model": cost_model.name}, cost_model
    comm = getattr(roofline, "comm", None)
    if isinstance(comm, CalibratedCommBackend):
        out.update(comm.stats())
    return out
