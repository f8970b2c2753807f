"""One GEMM op spec -> its canonical row, feature row and reference time, in plain Python.

The batch engine prices a step's GEMMs (qkv, o, gate_up, down, lm_head) once per new
token count; ``calibration.features`` costs ~60 us per call to featurize them with numpy
(one-element columns), these scalar versions a few microseconds per op. They follow
``features`` formula by formula, tests assert that they agree with it to 1e-12, and the
predictor checks it again on the first row it prices (``FamilyPredictor``: on a mismatch it
warns and uses the numpy features). Same interface as ``attention_query``:

* ``query_rows(op, has_mixed)`` == ``(features.canon_row_from_op(op)[1],)``
* ``feature_row(r)``            == ``features.featurize(<table of r>, "linear")[0]``
* ``reference_row(r)``          == ``features.reference_s(<table of r>, "linear")[0]``  (seconds)
* KEY_COLUMNS: the row columns the sub-model key depends on.

Memo grid (QUERY_GRID): 1/64 in log2 on every log feature, 1/8 on m_frac128 (the fill of
the last 128-row tile, a linear feature: at 1/64 it splits every 2 rows and so decides the
hit rate alone). Each new token count brings new GEMM shapes, so the memo hits little
whatever the grid; measured on the GEMM queries of two simulations (auto H100 bundle, 300
random requests at 20 req/s, ``bench/fidelity_query_cost.py --grid-study``; added error =
|price(grid) / price(unquantized features) - 1|):

    grid                      Llama-3.1-8B: hit  p95   max  | Qwen3-30B-A3B: hit  p95   max
    1/64                                  4.9 %  0.9 % 2.4 % |               3.1 %  0.9 % 1.9 %
    1/64, m_frac128 1/8 *                16.1 %  0.9 % 2.4 % |              14.0 %  1.0 % 1.9 %
    1/32, m_frac128 1/8                  23.4 %  1.5 % 3.6 % |              21.0 %  1.0 % 2.7 %
    1/16                                 24.5 %  2.4 % 6.3 % |              22.1 %  1.7 % 3.7 %

A hit saves one forest walk (~40 us CPU for the 32-tree GEMM forests); the coarser m_frac128
cells triple the hits at no measurable error, coarser log cells cost more error than they
save time.
"""

from __future__ import annotations

import math

from calibration import features as F
from frontier.ops import GemmOp

KEY_COLUMNS = ("dtype",)
QUERY_CELLS = 64.0       # 1/64 in log2 (~1 % of m): GEMM queries rarely repeat, so favour accuracy
M_FRAC_CELLS = 8.0       # m_frac128 (fill of the last 128-row tile, 0..1): cells of 16 rows
QUERY_GRID = tuple(M_FRAC_CELLS if n == "m_frac128" else QUERY_CELLS for n in F.FEATURE_NAMES["linear"])
_DB = F._DTYPE_BYTES


def _lg(x: float) -> float:
    return math.log2(1.0 + x)


def query_rows(op: GemmOp, has_mixed: bool = False) -> tuple[dict, ...]:
    """The one canonical row a GEMM is priced from (has_mixed: interface only)."""
    return (F.canon_row_from_op(op)[1],)


def feature_row(r: dict) -> list[float]:
    """Feature vector (features.FEATURE_NAMES["linear"] order) of one canonical row."""
    m, n, k = float(r["m"]), float(r["n"]), float(r["k"])
    flops = 2 * m * n * k
    nbytes = n * k * _DB.get(str(r["dtype"]), 2.0) + 2 * (m * k + m * n)
    cols = [_lg(m), _lg(n), _lg(k), _lg(flops), _lg(nbytes), _lg(max(flops / F.RIDGE_FLOP_PER_BYTE, nbytes))]
    n128 = math.ceil(n / 128)
    for tile in (64, 128, 256):
        mt = math.ceil(m / tile)
        cols += [_lg(mt), _lg(mt * n128), _lg(2 * mt * tile * n * k)]
    for tile in (128, 256):
        cols.append(_lg(math.ceil(math.ceil(m / tile) * n128 / F.SMS)))
    cols += [float(k % 128 == 0), float(n % 128 == 0), (m - 128 * math.floor((m - 1) / 128)) / 128]
    return cols


def reference_row(r: dict) -> float:
    """features.reference_s of one canonical GEMM row (seconds)."""
    m, n, k = float(r["m"]), float(r["n"]), float(r["k"])
    wbytes = _DB.get(str(r["dtype"]), 2.0)
    return 2 * m * n * k / F._REF_FLOPS + (n * k * wbytes + 2 * (m * k + m * n)) / F._REF_BW + F._REF_FIXED_S
