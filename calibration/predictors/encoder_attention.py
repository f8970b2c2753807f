"""Encoder attention family: a vision tower block's non-causal attention on one rank (vLLM's ViT
flash attention: each image attends to itself), one extra-trees forest on the "ratio" target,
whose reference is a roofline fitted on the training rows (``gemm_roofline.fit_per_key``, as the
gdn family's):

    reference_s = fixed + FLOPs x s_per_flop + bytes x s_per_byte

with FLOPs = 4 x heads x head_dim x batch x seq_len^2 and bytes = q, k, v in and the output out
(``features.encoder_attention_work``, as ``frontier.ops.EncoderAttentionOp`` counts them). The
forest sees images, lengths, tokens, heads, head_dim, the work terms and the (image x head x
128-row tile) blocks the kernel grids over.

Rows: AIConfigurator's vLLM 0.24.0 ``encoder_attention_perf`` tables (uniform batches of 1-64
images of 1-65,536 patches, 1-32 heads of 64 / 72 / 80 dims; the importer). A simulator op of
unequal images is priced as one uniform batch per length, summed (``EncoderAttentionOp.uniform_parts``:
as if they ran back to back, an upper bound of the one varlen kernel).
"""

from __future__ import annotations

import numpy as np

from calibration import features as F
from calibration.predictors.base import FamilyPredictor

TERMS = ("fixed_s", "s_per_flop", "s_per_byte")


def roofline_terms(canon: F.Canon) -> np.ndarray:
    """Rows x TERMS design matrix of an encoder_attention canonical table: 1, FLOPs, bytes (per rank)."""
    flops, nbytes = F.encoder_attention_work(canon)
    return np.column_stack([np.ones_like(flops), flops, nbytes])


class EncoderAttentionPredictor(FamilyPredictor):
    family = "encoder_attention"
    kernels_per_op = 1
    ratio_reference = "calibration.predictors.encoder_attention (a roofline fitted on the rows)"
    roofline_terms = staticmethod(roofline_terms)
    roofline_term_names = TERMS

    defaults = {"min_samples_leaf": 2, "max_samples": None, "target": "ratio"}
