"""AIConfigurator's power-law MoE routing, one draw: tokens per expert of a skewed step.

AIC times its MoE tables under named routing skews (``power_law_1.01``, ``power_law_1.2``) and
its estimator prices MoE layers from the ``power_law_1.01`` rows by default
(``aiconfigurator_core.sdk.config``: ``workload_distribution = "power_law"``; the model
classes set alpha 1.01). Its collector is not in the aiconfigurator-core wheel; this is our
reconstruction of its sampler (power_law_logits_v3, from memory, not checked against its
code), shared by the two sides that must agree on it: calibration featurizes AIC's power-law
rows with it (``calibration.features.power_law_rank_stats``), and the simulator's
``--moe-routing power_law:ALPHA`` routes a step with it (``simulator.moe_routing``).

One draw: per-expert weights i.i.d. from p(x) ~ x^-alpha on [1, 0.8 T] when T k > E, else on
[0.01, 2] (T tokens, k experts per token, E experts); scaled to the T k pairs and rounded (the
rounding deficit added to the largest experts, a surplus taken from the smallest); each expert
capped at T tokens (a token picks an expert at most once), so the loads may sum to less than
T k.
"""

from __future__ import annotations

import numpy as np


def power_law_loads(rng: np.random.Generator, tokens: int, experts: int, topk: int, alpha: float) -> np.ndarray:
    """Tokens per expert (float array of integers, length ``experts``) for one draw of ``rng``.

    Consumes exactly ``rng.random(experts)``; alpha = 1 draws log-uniformly (the limit of the
    inverse CDF)."""
    lo, hi = (1.0, 0.8 * tokens) if tokens * topk > experts else (0.01, 2.0)
    hi = max(hi, lo * 1.0001)
    pairs, a = tokens * topk, 1.0 - alpha
    u = rng.random(experts)
    if abs(a) < 1e-9:
        x = lo * (hi / lo) ** u
    else:
        x = ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)
    load = np.round(x / x.sum() * pairs)
    delta = int(pairs - load.sum())
    order = np.argsort(-load, kind="stable")
    if delta > 0:
        load[order[:delta]] += 1
    for i in range(-delta):                      # surplus: take from the smallest experts
        m = order[-(i % experts) - 1]
        load[m if load[m] > 0 else int(np.argmax(load))] -= 1
    return np.minimum(load, tokens)
