"""EPLB placement vs vLLM 0.33's own policy (``DefaultEplbPolicy.rebalance_experts``, numpy on the
host; no GPU): the same logical expert in every physical slot, global and hierarchical, with and
without redundant experts, even and heavy-tailed loads."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.eplb import eplb_placement

CASES = [  # experts, redundant, ranks, groups, nodes
    (256, 32, 32, 8, 4), (256, 0, 8, 8, 1), (128, 16, 16, 1, 2), (64, 8, 8, 4, 2), (256, 64, 64, 8, 8),
    (160, 0, 16, 1, 2), (128, 32, 32, 8, 4), (256, 32, 16, 8, 3),
]


@pytest.mark.parametrize("experts,redundant,ranks,groups,nodes", CASES)
def test_placement_equals_vllm(experts, redundant, ranks, groups, nodes):
    import torch
    from vllm.distributed.eplb.policy.default import DefaultEplbPolicy

    rng = np.random.default_rng(experts + redundant + ranks)
    for weight in (np.ones(experts), rng.pareto(1.2, experts) * 100, rng.integers(0, 50, experts).astype(float)):
        ours = eplb_placement(weight, experts + redundant, ranks, groups, nodes)
        nodes_used = nodes if ranks % nodes == 0 else 1      # vLLM's eplb_state falls back the same way
        want = DefaultEplbPolicy.rebalance_experts(torch.tensor(weight[None, :]), experts + redundant, groups,
                                                   nodes_used, ranks)[0].numpy()
        assert ours.tolist() == want.tolist()
