"""Gated DeltaNet family: the batch-shaped kernels of one GDN layer on one rank (Qwen3.5), one
extra-trees forest per kernel (op_name: the gated delta rule's FlashInfer "chunked" prefill scan
and "recurrent" decode update, the causal "conv1d" and its "conv1d_update" for decodes) on the
"ratio" target, whose reference is a roofline fitted per kernel on the training rows
(``gemm_roofline.fit_per_key``, as the MoE family's):

    reference_s = fixed + chunks x s_per_chunk + FLOPs x s_per_flop + bytes x s_per_byte

with chunks = ceil(longest sequence / 64) (the chunked scan's sequential depth; 1 for the other
kernels), FLOPs and bytes (states read and written, the kernel's inputs in and outputs out) as
``frontier.ops.GdnOp`` counts them (``features.gdn_work``): the form of the roofline the
simulator's cost model uses for the delta rule without a bundle (``simulator.cost_model``:
GDN_*; the conv1d there: the elementwise roofline), here fitted on the GPU's own rows. The
forest sees batch, lengths, tokens, heads and head dims, the conv window, the work terms and the
(sequence x value head) blocks the kernels grid over.

Rows: AIConfigurator's vLLM 0.24.0 ``gdn_perf`` tables (uniform batches of Qwen3.5's GDN
shapes at TP 1-8; the importer). Held-out p95 (20 %, seed 0, rows / token points): H100 2.1 /
3.5 %, H200 1.9 / 4.6 % (every kernel 0.3-4.8 %), against the token-count baseline's 71-75 %.
A simulator batch of unequal prefills is queried by its longest sequence and its token total
(``features.gdn_canon_row``); a verify's drafts (several tokens per decode) lie outside the
measured rows, which hold one: flagged out of range.
"""

from __future__ import annotations

import numpy as np

from calibration import features as F
from calibration.predictors.base import FamilyPredictor

TERMS = ("fixed_s", "s_per_chunk", "s_per_flop", "s_per_byte")


def roofline_terms(canon: F.Canon) -> np.ndarray:
    """Rows x TERMS design matrix of a gdn canonical table: 1, chunks, FLOPs, bytes (per rank)."""
    flops, state_bytes, act_bytes, chunks = F.gdn_work(canon)
    return np.column_stack([np.ones_like(flops), chunks, flops, state_bytes + act_bytes])


class GdnPredictor(FamilyPredictor):
    family = "gdn"
    kernels_per_op = 1
    ratio_reference = "calibration.predictors.gdn (a roofline fitted per kernel)"
    roofline_terms = staticmethod(roofline_terms)
    roofline_term_names = TERMS

    defaults = {"min_samples_leaf": 2, "max_samples": None, "target": "ratio"}
