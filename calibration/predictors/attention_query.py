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
* ``cell_parts(op, m)``   == (KEY_COLUMNS, memo cell, ``reference_row``) of each row of
  ``query_rows(op, m)``; ``cell_row(shape, cell)`` is the canonical row at the cell's centre
  (== those rows at a ~exact grid, tested)

The sub-model key is the predictor's own (``submodel_keys``), memoized per head shape
(KEY_COLUMNS): it must not depend on the batch, only on the kernel.

Memo cells (QUERY_CELLS, DECODE_CELL_SCALE): a row's counts and length statistics (the
canonical row's own quantities) are rounded in log2 (``grid.index``): the prefill statistics
and the decode count to 1/16 (~4.4 % of a count or length), the decode mean to 1/32 and the
decode min, max, p50 and p90 to 1/4 (~19 %); the cell's model output and out-of-range flag are
those of its representative row (``cell_row``: every statistic at the cell's centre, the
integer ones at the nearest integer), computed once; each query multiplies the model's ratio
by its own exact reference time. A hit thus costs the statistics (~3.3 us for ~35 decodes,
replayed), no features. Chosen on the attention queries of two simulations (auto H100 bundle,
300 random requests at 20 req/s, ``bench/fidelity_query_cost.py --grid-study``, which scales
every statistic's cells with QUERY_CELLS; added error = |price(grid) / price(~unquantized
statistics) - 1|, 2026-11-30):

    every statistic at 1/QUERY_CELLS  Llama-3.1-8B: hit  p50    p95   max  | Qwen3-30B-A3B: hit  p50    p95   max
    64                                42.5 %  0.00 %  0.67 % 4.1 % |                31.4 %  0.00 %  0.45 % 2.7 %
    32                                55.1 %  0.00 %  1.53 % 7.1 % |                49.0 %  0.00 %  1.00 % 4.8 %
    16 (until the ninth stop)         68.1 %  0.00 %  1.88 % 7.1 % |                64.7 %  0.00 %  1.57 % 7.7 %
    8                                 83.5 %  0.28 %  4.26 % 8.6 % |                77.6 %  0.42 %  2.24 % 10.8 %

    decode min, max, p50, p90 at QUERY_CELLS / 4 per log2, decode mean at 2 x QUERY_CELLS:
    64                                49.8 %  0.00 %  0.39 % 3.1 % |                38.5 %  0.00 %  0.19 % 2.7 %
    32                                63.1 %  0.00 %  2.14 % 4.1 % |                55.4 %  0.00 %  1.37 % 4.8 %
    16 (chosen)                       77.5 %  0.00 %  1.84 % 7.1 % |                71.9 %  0.00 %  1.48 % 4.8 %
    8                                 89.6 %  0.28 %  4.06 % 9.1 % |                83.8 %  0.44 %  2.48 % 10.8 %

Misses came mostly from a decode statistic crossing a 1/16 cell: each of min, max, p50 and p90
alone at 1/4 added 1-4 points of hits (Llama-3.1-8B) for at most +0.4 points of p95, while the
count and the mean at 1/4 raised the p95 to 4.3 and 4.9 %; the mean at 1/32 pays back the
error of the coarse others (p95 1.84 / 1.48 % against 1.88 / 1.57 %). (The former grid on the
31 features themselves, at 1/16: hits 60 / 54 %, p95 2.0 / 1.9 %, max 4.0 / 5.8 %, and every hit
paid the features.) The added error stays well below the model's own held-out p95 (~7 %). The out-of-range flag is the
representative row's, where the model is evaluated: it says whether that evaluation
extrapolated, so a query within about half a cell (~2 % for the counts, ~10 % for a decode
min or max) of the measured range's edge may be flagged either way.
"""

from __future__ import annotations

import math
from typing import Sequence

from calibration import features as F
from calibration.predictors import grid
from frontier.ops import AttentionOp

_DB = F._DTYPE_BYTES

KEY_COLUMNS = ("num_heads", "num_kv_heads", "head_dim", "window_size", "kv_dtype", "is_mla")

# Memo cells of the per-step query: 16 per log2 unit of every count and length statistic
# (~4.4 %), scaled per decode statistic by DECODE_CELL_SCALE. Chosen on the queries of two
# simulations (see the docstring). Memo cells are keyed by grid index, so whoever changes
# either must reset the predictor's memos.
QUERY_CELLS = 16.0
# Cells per log2 unit of each decode statistic (count, min, max, mean, p50, p90) as multiples of
# QUERY_CELLS: the mean, which sets the reference time, at 32; min, max and the percentiles,
# which only shape the model's ratio, at 4 (see the docstring's second table).
DECODE_CELL_SCALE = (1.0, 0.25, 0.25, 2.0, 0.25, 0.25)
_INTEGER_PREFILL = (0, 1, 2, 6, 7)      # prefill statistics that are integers: count, min, max, context, pairs


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


def cell_parts(op: AttentionOp, has_mixed: bool) -> list[tuple[tuple, tuple, float]]:
    """(KEY_COLUMNS values, cell, reference seconds) of each row ``query_rows`` gives. The cell
    holds the row's kind and the grid indices (``grid.index``: QUERY_CELLS cells per log2 unit
    for the prefill statistics, ``_decode_cells`` for the decode ones) of its counts and length
    statistics, the canonical row's own quantities (``canon_row``: prefill count, min, max,
    mean, p50, p90 of the new tokens, largest context, attention pairs; decode count, min, max,
    mean, p50, p90 of the context + 1); ``cell_row`` turns it back into a canonical row. The
    reference time (``reference_row``, through ``_reference_s`` without a row dict; inline for a
    decode-only batch, the same operations in the same order) is the row's exact one. Two
    shortcuts give the same numbers with fewer operations: a decode-only batch (the median
    without ``_quantile``) and a batch with one prefill (its length is every length statistic).
    ~3.3 us for ~35 decodes, ~5.4 us with a prefill (CPU, replayed from a Llama-3.1-8B run;
    3.9 and 7.3 us before the shortcuts)."""
    head = (op.num_heads, op.num_kv_heads, op.head_dim, op.kv_bytes_per_elem, op.is_mla)
    shape, heads, kvh, hd, kvb = _HEAD_SHAPES.get(head) or _head_shape(head)
    lg = math.log2
    decode_ctx = op.decode_ctx
    if decode_ctx:
        s = sorted(decode_ctx)                  # the schema's context counts the new token: + 1
        n = len(s)
        nd = float(n)
        dmean = sum(s) / nd + 1.0
        half = (n - 1) >> 1                     # _quantile(s, 0.5): the middle, or the two middles' midpoint
        p50 = s[half] + 1.0 if n & 1 else s[half + 1] - (s[half + 1] - s[half]) * 0.5 + 1.0
        cn, cmin, cmax, cmean, c50, c90 = _decode_cells()
        dec = (round(lg(1.0 + nd) * cn), round(lg(2.0 + s[0]) * cmin), round(lg(2.0 + s[-1]) * cmax),
               round(lg(1.0 + dmean) * cmean), round(lg(1.0 + p50) * c50),
               round(lg(1.0 + (_quantile(s, 0.9) + 1.0)) * c90))
        if not op.prefill_new:                  # _reference_s of a decode-only row
            x = nd * dmean
            return [(shape, ("generation", (), dec), 4 * heads * hd * x / F._REF_FLOPS
                     + (x * 2 * kvh * hd * kvb + nd * heads * hd * 4) / F._REF_BW + F._REF_FIXED_S)]
    else:
        dec = ()
    pre = ()
    new = op.prefill_new
    if len(new) == 1:                           # one prefill: its length is every length statistic
        k, ctx = new[0], op.prefill_ctx[0]
        npre, ptok = 1.0, float(k)
        pmean, pairs = ptok, float(k * ctx + k * (k + 1) / 2)
        c = QUERY_CELLS
        length = round(lg(1.0 + k) * c)
        pre = (round(c), length, length, length, length, length, round(lg(1.0 + ctx) * c), round(lg(1.0 + pairs) * c))
    elif new:
        s = sorted(new)
        npre, ptok = float(len(s)), float(sum(s))
        pmean = ptok / npre
        pairs = float(sum(k * c + k * (k + 1) / 2 for k, c in zip(new, op.prefill_ctx)))
        c = QUERY_CELLS
        pre = (round(lg(1.0 + npre) * c), round(lg(1.0 + s[0]) * c), round(lg(1.0 + s[-1]) * c),
               round(lg(1.0 + pmean) * c), round(lg(1.0 + _quantile(s, 0.5)) * c),
               round(lg(1.0 + _quantile(s, 0.9)) * c), round(lg(1.0 + max(op.prefill_ctx)) * c),
               round(lg(1.0 + pairs) * c))
    if pre and dec and has_mixed:
        return [(shape, ("mixed", pre, dec), _reference_s(heads, kvh, hd, 0.0, kvb, nd, dmean, npre, pmean, pairs, ptok))]
    parts = []
    if pre:
        parts.append((shape, ("context", pre, ()), _reference_s(heads, kvh, hd, 0.0, kvb, 0.0, 0.0, npre, pmean, pairs, ptok)))
    if dec or not pre:
        parts.append((shape, ("generation", (), dec), _reference_s(heads, kvh, hd, 0.0, kvb, nd, dmean, 0.0, 0.0, 0.0, 0.0)))
    return parts


# (num_heads, num_kv_heads, head_dim, kv_bytes_per_elem, is_mla) of an op -> (KEY_COLUMNS values,
# heads, KV heads, head dim and KV bytes per element as the reference time takes them)
_HEAD_SHAPES: dict[tuple, tuple] = {}


def _head_shape(head: tuple) -> tuple:
    """``cell_parts``' per-head-shape constants (computed once per head shape)."""
    heads, kvh, hd, kv_bytes, is_mla = head
    kv_dtype = F._kv_dtype(kv_bytes)
    out = _HEAD_SHAPES[head] = ((heads, kvh, hd, 0.0, kv_dtype, is_mla), float(heads), float(kvh), float(hd),
                                _DB.get(kv_dtype, 2.0))
    return out


def _decode_cells() -> tuple[float, ...]:
    """Cells per log2 unit of the decode statistics (count, min, max, mean, p50, p90):
    QUERY_CELLS x DECODE_CELL_SCALE, computed once per QUERY_CELLS value."""
    cells = _DECODE_CELLS.get(QUERY_CELLS)
    if cells is None:
        cells = _DECODE_CELLS[QUERY_CELLS] = tuple(QUERY_CELLS * k for k in DECODE_CELL_SCALE)
    return cells


_DECODE_CELLS: dict[float, tuple[float, ...]] = {}


def cell_row(shape: tuple, cell: tuple) -> dict[str, object]:
    """The canonical row at a cell's representative point (every grid index at its centre,
    ``grid.centre``; the integer statistics, counts, min, max, largest context and pairs, at the
    nearest integer, ``grid.nearest_integer``; prefill tokens = count x mean): the row the model
    is evaluated on."""
    kind, pre, dec = cell
    heads, kvh, hd, window, kv_dtype, is_mla = shape
    c, n = grid.centre, grid.nearest_integer
    if pre:
        npre, pmin, pmax, pmean, p50, p90, pctx, pairs = (
            (n if j in _INTEGER_PREFILL else c)(i, QUERY_CELLS) for j, i in enumerate(pre))
    else:
        npre = pmin = pmax = pmean = p50 = p90 = pctx = pairs = 0.0
    if dec:
        k = _decode_cells()
        nd, dmin, dmax, dmean, d50, d90 = ((n if j < 3 else c)(i, k[j]) for j, i in enumerate(dec))
    else:
        nd = dmin = dmax = dmean = d50 = d90 = 0.0
    return {"op_name": kind, "batch_size": npre + nd, "num_prefill": npre, "num_decode": nd,
            "prefill_tokens": npre * pmean, "prefill_len_min": pmin, "prefill_len_max": pmax,
            "prefill_len_mean": pmean, "prefill_len_p50": p50, "prefill_len_p90": p90,
            "prefill_ctx_max": pctx, "prefill_pairs": pairs, "decode_ctx_min": dmin, "decode_ctx_max": dmax,
            "decode_ctx_mean": dmean, "decode_ctx_p50": d50, "decode_ctx_p90": d90, "num_heads": heads,
            "num_kv_heads": kvh, "head_dim": hd, "window_size": window, "kv_dtype": kv_dtype, "is_mla": is_mla}


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
    return _reference_s(float(row["num_heads"]), float(row["num_kv_heads"]), float(row["head_dim"]),
                        float(row["window_size"]), _DB.get(str(row["kv_dtype"]), 2.0), float(row["num_decode"]),
                        float(row["decode_ctx_mean"]), float(row["num_prefill"]), float(row["prefill_len_mean"]),
                        float(row["prefill_pairs"]), float(row["prefill_tokens"]))


def _reference_s(heads: float, kvh: float, hd: float, window: float, kvb: float, nd: float, dmean: float,
                 npre: float, pmean: float, pairs: float, ptok: float) -> float:
    """``reference_row`` from the row's numbers (seconds): heads, KV heads, head dim, window
    (tokens, 0 = none), KV bytes per element, decode count and mean context, prefill count,
    mean new tokens, attention pairs and new tokens."""
    if window > 0:
        dmean = min(dmean, window)
        pairs = min(pairs, npre * pmean * window)
    flops = 4 * heads * hd * (pairs + nd * dmean)
    kv_bytes = (nd * dmean + ptok * 2) * 2 * kvh * hd * kvb
    qo_bytes = (ptok + nd) * heads * hd * 4
    return flops / F._REF_FLOPS + (kv_bytes + qo_bytes) / F._REF_BW + F._REF_FIXED_S
