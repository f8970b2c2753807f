"""Load statistics of AIC's MoE rows: balanced rows exact, power-law rows from the reconstructed
sampler (features.power_law_rank_stats: seeded, busiest EP rank, experts capped at T)."""

import numpy as np
import pandas as pd

from calibration import features as F


def _rows(dist: str, tokens: int, experts: int, topk: int, ep: int) -> pd.DataFrame:
    return pd.DataFrame([{"num_tokens": tokens, "hidden_size": 2048, "inter_size": 768, "topk": topk,
                          "num_experts": experts, "moe_tp_size": 1, "moe_ep_size": ep, "moe_dtype": "bf16",
                          "distribution": dist}])


def test_power_law_rank_stats_exact():
    assert F.power_law_rank_stats(64, 8, 2, 1, 1.2) == (46.0, 220.4443359375)
    assert F.power_law_rank_stats(16, 128, 8, 4, 1.01) == (6.0625, 3.1766357421875)
    assert F.power_law_rank_stats(4, 256, 8, 1, 1.2) == (2.0, 0.21142578125)      # T k <= E: [0.01, 2]
    assert F.power_law_rank_stats(1024, 256, 8, 8, 1.01) == (200.5625, 3577.6851196289062)


def test_power_law_max_is_capped_at_tokens_and_exceeds_balanced():
    for tokens in (1, 2, 8, 64, 512):
        for experts, topk, ep in ((8, 2, 1), (128, 8, 1), (256, 8, 16)):
            mx, var = F.power_law_rank_stats(tokens, experts, topk, ep, 1.2)
            assert mx <= tokens and var >= 0.0
            if tokens * topk >= 4 * experts:
                assert mx > np.ceil(tokens * topk / experts)


def test_moe_rows_use_the_stats():
    bal = F.canon_from_rows(_rows("balanced", 100, 128, 8, 4), "moe")
    assert (float(bal["routed_pairs"][0]), float(bal["max_tokens_per_expert"][0]),
            float(bal["var_tokens_per_expert"][0])) == (200.0, 7.0, 0.0)
    pl = F.canon_from_rows(_rows("power_law_1.2", 100, 128, 8, 4), "moe")
    assert float(pl["routed_pairs"][0]) == 200.0      # the mean rank's share, as for balanced rows
    assert (float(pl["max_tokens_per_expert"][0]), float(pl["var_tokens_per_expert"][0])) == \
        F.power_law_rank_stats(100, 128, 8, 4, 1.2)
    given = _rows("power_law_1.2", 100, 128, 8, 4).assign(max_tokens_per_expert=9.0, var_tokens_per_expert=1.5)
    c = F.canon_from_rows(given, "moe")
    assert (float(c["max_tokens_per_expert"][0]), float(c["var_tokens_per_expert"][0])) == (9.0, 1.5)
