"""An attention roofline fitted per sub-model (MHA | MLA module x KV dtype): the reference
time of the attention family's "ratio" target.

    reference_s = fixed + prefill FLOPs x s_per_prefill_flop + decode FLOPs x s_per_decode_flop
                  + KV bytes x s_per_kv_byte + query/output bytes x s_per_qo_byte

with the quantities of the nominal ``features.reference_s`` split by kernel phase: prefill
FLOPs = 4 heads head_dim x causal pairs (clipped to the window), decode FLOPs = 4 heads
head_dim x decode requests x mean context (clipped), KV bytes = (decode requests x mean
context + 2 x prefill tokens) x 2 KV heads head_dim x KV bytes per element, query/output
bytes = (prefill tokens + decode requests) x heads head_dim x 4. Prefill runs a compute-bound
kernel and decode a memory-bound one, so their FLOPs get separate rates. The five
coefficients are fitted per sub-model key by non-negative least squares on relative error over
the training rows (``gemm_roofline.fit_per_key``), and the forests learn log(latency / fitted
roofline).

Measured (AIC vLLM 0.24.0 attention tables, 20 % held out, seed 0, p95 APE, features v7
forests; the roofline fitted on the training split only), nominal reference -> this one: H200
rows 8.12 -> 7.28 %, H100 rows 8.46 -> 7.74 %, H200 token points 14.06 -> 11.53 %. Two more
terms for the longest decode context (its FLOPs and its KV bytes: the last CTA to finish)
left the H200 rows at 7.28 %: not kept.
"""

from __future__ import annotations

import numpy as np

from calibration import features as F

TERMS = ("fixed_s", "s_per_prefill_flop", "s_per_decode_flop", "s_per_kv_byte", "s_per_qo_byte")


def roofline_terms(canon: F.Canon) -> np.ndarray:
    """Rows x TERMS design matrix of an attention canonical table: 1, prefill FLOPs, decode
    FLOPs, KV bytes, query/output bytes."""
    heads, kvh, hd = F._f(canon, "num_heads"), F._f(canon, "num_kv_heads"), F._f(canon, "head_dim")
    window = F._f(canon, "window_size")
    kvb = np.array([F._DTYPE_BYTES.get(str(d), 2.0) for d in canon["kv_dtype"]])
    nd, dmean = F._f(canon, "num_decode"), F._f(canon, "decode_ctx_mean")
    dmean = np.where(window > 0, np.minimum(dmean, window), dmean)
    npre, pmean = F._f(canon, "num_prefill"), F._f(canon, "prefill_len_mean")
    pairs = F._f(canon, "prefill_pairs")
    pairs = np.where(window > 0, np.minimum(pairs, npre * pmean * window), pairs)
    ptok = F._f(canon, "prefill_tokens")
    return np.column_stack([np.ones_like(heads), 4 * heads * hd * pairs, 4 * heads * hd * (nd * dmean),
                            (nd * dmean + ptok * 2) * 2 * kvh * hd * kvb, (ptok + nd) * heads * hd * 4])
