"""One attention op spec -> its canonical row, feature row and reference time, in plain Python.

The simulator prices one attention op per step, and its length statistics change every
step, so this query is never a repeat. ``calibration.features`` builds the same
quantities as numpy columns, which costs ~0.3 ms for a single row (np.percentile,
column_stack, ~60 one-element array operations); these scalar versions cost ~10 us
(CPU, 26 decode requests). They follow ``features`` formula by formula, and tests assert that they
agree with it to 1e-12, so the model sees the features it was fitted on:

* ``canon_row(op)``       == ``features.canon_row_from_op(op)[1]``
* ``feature_row(r)``      == ``features.featurize(<table of r>, "attention")[0]``
* ``reference_row(r)``    == ``features.reference_s(<table of r>, "attention")[0]``  (seconds)
* ``split_mixed_row(r)``  == ``features.split_mixed(<table of r>)``
* ``fast_rows(op, m)``    == (KEY_COLUMNS, ``feature_row``, ``reference_row``) of each row of
  ``query_rows(op, m)``, without building the canonical rows (None: use those)

The sub-model key is the predictor's own (``submodel_keys``), memoized per head shape
(KEY_COLUMNS): it must not depend on the batch, only on the kernel.

Memo grid (QUERY_GRID): a query is priced at the centre of its cell, 1/16 in log2 on every
feature, and memoized per (sub-model, cell). Chosen on the attention queries of two
simulations (auto H100 bundle, 300 random requests at 20 req/s, ``bench/fidelity_query_cost.py
--grid-study``; added error = |price(grid) / price(unquantized features) - 1|):

    grid (cells per log2)      Llama-3.1-8B: hit  p95   max  | Qwen3-30B-A3B: hit  p95   max
    1/64                                    36 %  0.7 % 3.6 % |               25 %  0.6 % 2.2 %
    1/32                                    50 %  2.0 % 4.2 % |               37 %  1.6 % 4.8 %
    1/16 (chosen)                           60 %  2.0 % 4.0 % |               54 %  1.9 % 5.8 %
    1/8                                     71 %  4.2 % 7.5 % |               64 %  2.8 % 8.3 %
    counts 1/16, lengths 1/8                69 %  3.9 % 8.0 % |               62 %  3.6 % 8.3 %

(p50 of the added error: 0.00 % and 0.15 % at 1/16.) A coarser grid on the slowly moving
length statistics adds ~8 points of hits for twice the p95 and max error; a hit saves one
forest walk (~20 us), while every query still pays its features (~15 us), so the finer
grid was kept. The added error stays well below the model's own held-out p95 (~15 %).
"""

from __future__ import annotations

import math
from typing import Sequence

from calibration import features as F
from frontier.ops import AttentionOp

_DB = F._DTYPE_BYTES

KEY_COLUMNS = ("num_heads", "num_kv_heads", "head_dim", "window_size", "kv_dtype", "is_mla")

# Memo grid of the per-step query: 16 cells per log2 unit on every feature (1/16 in log2,
# ~4.4 % of a count or length). Chosen on the queries of two simulations (see the docstring).
# Memo cells are keyed by grid index, so whoever changes it must reset the predictor's memos.
QUERY_CELLS = 16.0
QUERY_GRID = (QUERY_CELLS,) * len(F.FEATURE_NAMES["attention"])


def _lg(x: float) -> float:
    return math.log2(1.0 + x)


def _quantile(s: list[float], q: float) -> float:
    """numpy's default ("linear") percentile of the sorted list s, q in [0, 1]."""
    vi = (len(s) - 1) * q
    lo = math.floor(vi)
    hi = min(lo + 1, len(s) - 1)
    t = vi - lo
    a, b = s[lo], s[hi]
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def _stats(xs: Sequence[int]) -> tuple[float, float, float, float, float]:
    """(min, max, mean, p50, p90) of integer lengths (sorted as ints: the same floats, cheaper)."""
    if not xs:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    s = sorted(xs)
    return float(s[0]), float(s[-1]), math.fsum(s) / len(s), float(_quantile(s, 0.5)), float(_quantile(s, 0.9))


def canon_row(op: AttentionOp) -> dict[str, object]:
    return F.attention_canon_row(op, _stats)


def fast_rows(op: AttentionOp, has_mixed: bool) -> list[tuple[tuple, list[float], float]] | None:
    """(KEY_COLUMNS values, feature_row, reference_row) of each row ``query_rows`` gives, straight
    from the op without canonical rows: ~4 us instead of ~12 us for a step of ~32 decodes, ~11
    instead of ~22 for a chunked-prefill step (a decode part and a prefill part). The same
    formulas as ``canon_row`` / ``split_mixed_row`` + ``_attention`` + ``reference_row`` with the
    window 0 that ``canon_row`` writes; the predictor checks that they agree on the first op it
    prices this way. None for a mixed op when the predictor has mixed rows (one row with both)."""
    if op.prefill_new and op.decode_ctx and has_mixed:
        return None
    heads, kvh, hd = float(op.num_heads), float(op.num_kv_heads), float(op.head_dim)
    kv_dtype = F._kv_dtype(op.kv_bytes_per_elem)
    shape = (op.num_heads, op.num_kv_heads, op.head_dim, 0.0, kv_dtype, op.is_mla)
    kvb = _DB.get(kv_dtype, 2.0)
    head = [_lg(heads), _lg(kvh), _lg(hd), 0.0, kvb, float(bool(op.is_mla))]
    lg_ratio = _lg(heads / max(kvh, 1.0))
    parts = []
    if op.prefill_new:
        s = sorted(op.prefill_new)
        npre, ptok = float(len(s)), float(sum(s))
        pmean = math.fsum(s) / len(s)
        pairs = float(sum(n * c + n * (n + 1) / 2 for n, c in zip(op.prefill_new, op.prefill_ctx)))
        flops = 4 * heads * hd * pairs
        q_tiles = npre * math.ceil(pmean / 128) * heads
        lg_npre, lg_ptok = _lg(npre), _lg(ptok)
        x = [lg_npre, lg_npre, 0.0, lg_ptok, lg_ptok, _lg(s[0]), _lg(s[-1]), _lg(pmean), _lg(_quantile(s, 0.5)),
             _lg(_quantile(s, 0.9)), _lg(max(op.prefill_ctx)), 0.0, 0.0, 0.0, 0.0, 0.0, *head,
             _lg(flops), 0.0, _lg(flops), _lg(q_tiles), _lg(pairs / max(npre, 1.0)), _lg(math.ceil(q_tiles / F.SMS)),
             0.0, 0.0, lg_ratio]
        reference_s = (flops / F._REF_FLOPS + (ptok * 2 * 2 * kvh * hd * kvb + ptok * heads * hd * 4) / F._REF_BW
                       + F._REF_FIXED_S)
        parts.append((shape, x, reference_s))
    if op.decode_ctx:
        s = sorted(op.decode_ctx)              # the schema's context counts the new token: + 1 below
        nd = float(len(s))
        dmean = math.fsum(s) / len(s) + 1.0
        kv_bytes = nd * dmean * 2 * kvh * hd * kvb
        flops = 4 * heads * hd * nd * dmean
        lg_nd, lg_q = _lg(nd), _lg(nd * kvh)
        x = [lg_nd, 0.0, lg_nd, 0.0, lg_nd, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, _lg(s[0] + 1.0), _lg(s[-1] + 1.0),
             _lg(dmean), _lg(_quantile(s, 0.5) + 1.0), _lg(_quantile(s, 0.9) + 1.0), *head,
             0.0, _lg(kv_bytes), _lg(flops), lg_q, 0.0, _lg(math.ceil(nd * kvh / F.SMS)), _lg(math.ceil(dmean / 128)),
             lg_q, lg_ratio]
        reference_s = flops / F._REF_FLOPS + (kv_bytes + nd * heads * hd * 4) / F._REF_BW + F._REF_FIXED_S
        parts.append((shape, x, reference_s))
    return parts


def query_rows(op: AttentionOp, has_mixed: bool) -> tuple[dict, ...]:
    """Canonical rows an op is priced from: its own row, or, for a mixed batch when the
    predictor has no mixed training rows, its prefill part and its decode part (summed)."""
    row = canon_row(op)
    if row["op_name"] == "mixed" and not has_mixed:
        return split_mixed_row(row)
    return (row,)


def split_mixed_row(row: dict) -> tuple[dict, dict]:
    """(prefill-only part, decode-only part) of a canonical attention row."""
    pre, dec = dict(row), dict(row)
    for k in ("decode_ctx_min", "decode_ctx_max", "decode_ctx_mean", "decode_ctx_p50", "decode_ctx_p90",
              "num_decode"):
        pre[k] = 0.0
    pre["batch_size"], pre["op_name"] = row["num_prefill"], "context"
    for k in ("prefill_len_min", "prefill_len_max", "prefill_len_mean", "prefill_len_p50", "prefill_len_p90",
              "prefill_ctx_max", "prefill_pairs", "prefill_tokens", "num_prefill"):
        dec[k] = 0.0
    dec["batch_size"], dec["op_name"] = row["num_decode"], "generation"
    return pre, dec


# ---------------------------------------------------------------- features

def _attention(r: dict) -> list[float]:
    heads, kvh, hd = float(r["num_heads"]), float(r["num_kv_heads"]), float(r["head_dim"])
    window = float(r["window_size"])
    kvb = _DB.get(str(r["kv_dtype"]), 2.0)
    nd, dmean = float(r["num_decode"]), float(r["decode_ctx_mean"])
    eff_dmean = min(dmean, window) if window > 0 else dmean
    pmean, npre = float(r["prefill_len_mean"]), float(r["num_prefill"])
    pairs = float(r["prefill_pairs"])
    if window > 0:
        pairs = min(pairs, npre * pmean * window)
    prefill_flops = 4 * heads * hd * pairs
    decode_kv_bytes = nd * eff_dmean * 2 * kvh * hd * kvb
    decode_flops = 4 * heads * hd * nd * eff_dmean
    ptok = float(r["prefill_tokens"])
    q_tiles = npre * math.ceil(pmean / 128) * heads + nd * kvh
    cols = [_lg(float(r["batch_size"])), _lg(npre), _lg(nd), _lg(ptok), _lg(ptok + nd)]
    cols += [_lg(float(r[k])) for k in ("prefill_len_min", "prefill_len_max", "prefill_len_mean",
                                        "prefill_len_p50", "prefill_len_p90", "prefill_ctx_max",
                                        "decode_ctx_min", "decode_ctx_max", "decode_ctx_mean",
                                        "decode_ctx_p50", "decode_ctx_p90")]
    cols += [_lg(heads), _lg(kvh), _lg(hd), _lg(window), kvb, float(bool(r["is_mla"])),
             _lg(prefill_flops), _lg(decode_kv_bytes), _lg(prefill_flops + decode_flops), _lg(q_tiles)]
    cols += [_lg(pairs / max(npre, 1.0)), _lg(math.ceil(q_tiles / F.SMS)), _lg(math.ceil(eff_dmean / 128)),
             _lg(nd * kvh), _lg(heads / max(kvh, 1.0))]
    return cols


def feature_row(row: dict) -> list[float]:
    """Feature vector (features.FEATURE_NAMES["attention"] order) of one canonical row."""
    return _attention(row)


def reference_row(row: dict) -> float:
    """features.reference_s of one canonical attention row (seconds)."""
    heads, kvh, hd = float(row["num_heads"]), float(row["num_kv_heads"]), float(row["head_dim"])
    window = float(row["window_size"])
    kvb = _DB.get(str(row["kv_dtype"]), 2.0)
    nd, dmean = float(row["num_decode"]), float(row["decode_ctx_mean"])
    npre, pmean = float(row["num_prefill"]), float(row["prefill_len_mean"])
    pairs = float(row["prefill_pairs"])
    if window > 0:
        dmean = min(dmean, window)
        pairs = min(pairs, npre * pmean * window)
    ptok = float(row["prefill_tokens"])
    flops = 4 * heads * hd * (pairs + nd * dmean)
    kv_bytes = (nd * dmean + ptok * 2) * 2 * kvh * hd * kvb
    qo_bytes = (ptok + nd) * heads * hd * 4
    return flops / F._REF_FLOPS + (kv_bytes + qo_bytes) / F._REF_BW + F._REF_FIXED_S
