"""Fitted per-family predictors (linear, attention, moe, comm, elementwise, gdn, encoder_attention) behind one
query contract.

See :mod:`calibration.predictors.base` for the contract; :func:`make_predictor` builds an
unfitted predictor of a family with its default (bundle-sized) hyper-parameters.
"""

from __future__ import annotations

from calibration.predictors.attention import AttentionPredictor
from calibration.predictors.base import FamilyPredictor
from calibration.predictors.comm import CommPredictor
from calibration.predictors.elementwise import ElementwisePredictor
from calibration.predictors.encoder_attention import EncoderAttentionPredictor
from calibration.predictors.gdn import GdnPredictor
from calibration.predictors.linear import LinearPredictor
from calibration.predictors.moe import MoePredictor

PREDICTORS = {"linear": LinearPredictor, "attention": AttentionPredictor, "moe": MoePredictor,
              "comm": CommPredictor, "elementwise": ElementwisePredictor, "gdn": GdnPredictor,
              "encoder_attention": EncoderAttentionPredictor}


def make_predictor(family: str, **params) -> FamilyPredictor:
    if family not in PREDICTORS:
        raise ValueError(f"no predictor for family {family!r}; valid: {', '.join(PREDICTORS)}")
    return PREDICTORS[family](**params)


__all__ = ["FamilyPredictor", "LinearPredictor", "AttentionPredictor", "MoePredictor",
           "CommPredictor", "ElementwisePredictor", "GdnPredictor", "EncoderAttentionPredictor", "PREDICTORS",
           "make_predictor"]
