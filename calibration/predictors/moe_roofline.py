"""A MoE roofline fitted per MoE dtype: the reference time of the MoE family's "ratio" target.

    reference_s = fixed + FLOPs x s_per_flop + weight bytes x s_per_weight_byte
                  + activation bytes x s_per_act_byte + largest-expert FLOPs x s_per_max_expert_flop

with, per rank (inter = inter_size / moe_tp), FLOPs = 6 hidden inter x routed pairs (gate/up
and down over every routed token), weight bytes = 3 hidden inter x active local experts x
the dtype's bytes per weight, activation bytes = 2 pairs (2 hidden + 3 inter) (the terms of
the nominal ``features.reference_s``), and largest-expert FLOPs = 6 hidden inter x the most
loaded local expert's tokens: a grouped GEMM ends with its most loaded expert, so a skewed
routing costs more than its pairs say. The five coefficients are fitted per sub-model key
(the MoE dtype, i.e. the kernel family) as the GEMM roofline's are
(``gemm_roofline.fit_per_key``: non-negative least squares on relative error over the training
rows), and the forests learn log(latency / fitted roofline).

Measured (AIC vLLM 0.24.0 MoE tables, 20 % held out, seed 0, p95 APE, features v6 forests; the
roofline fitted on the training split only), nominal reference -> fitted without the
largest-expert term -> fitted with it (this module): H200 rows 12.53 -> 11.07 -> 10.49 %, H100
rows 12.25 -> 10.39 % (with it), token points H200 14.67 -> 12.85 %, H100 14.67 -> 12.76 %. A
sixth term per active expert (a fixed cost per expert GEMM) moved the p95 by -0.2 to +0.1
points: not kept.
"""

from __future__ import annotations

import numpy as np

from calibration import features as F

TERMS = ("fixed_s", "s_per_flop", "s_per_weight_byte", "s_per_act_byte", "s_per_max_expert_flop")


def roofline_terms(canon: F.Canon) -> np.ndarray:
    """Rows x TERMS design matrix of a MoE canonical table: 1, FLOPs, weight bytes, activation
    bytes, largest-expert FLOPs (per rank)."""
    hid, pairs = F._f(canon, "hidden_size"), F._f(canon, "routed_pairs")
    inter = F._f(canon, "inter_size") / F._f(canon, "moe_tp_size")
    local = np.maximum(1.0, F._f(canon, "num_experts") / F._f(canon, "moe_ep_size"))
    active = np.minimum(local, np.maximum(pairs, 1.0))
    wbytes = F.dtype_bytes(canon["moe_dtype"])
    max_load = F._f(canon, "max_tokens_per_expert")
    return np.column_stack([np.ones_like(hid), 6 * hid * inter * pairs, 3 * hid * inter * active * wbytes,
                            pairs * (2 * hid + 3 * inter) * 2, 6 * hid * inter * max_load])
