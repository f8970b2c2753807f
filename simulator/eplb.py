"""Expert-parallel load balancing (vLLM's ``--enable-eplb``): where each expert's replicas sit.

vLLM records how many tokens every expert receives over a window of steps and, every
``step_interval`` steps, rearranges the experts: ``num_redundant_experts`` extra replicas go to
the busiest experts, and the replicas are packed onto the EP ranks so each rank carries about the
same load (``vllm/distributed/eplb/policy/default.py``, DeepSeek's EPLB). A token routed to an
expert with several replicas is sent to one of them by a hash of its index, so each replica
takes about an equal share.

``eplb_placement`` is that policy, ported to one layer in numpy (the same steps, the same
tie-breaking: ``np.argsort`` / ``np.argmin`` / ``np.argmax`` as vLLM's numpy code): hierarchical
when the model's expert groups (DeepSeek-V3's ``n_group``) divide evenly over the nodes the EP
group spans (groups packed to nodes, replicas made within nodes, then packed to GPUs), else global.
The simulator places the experts once, in the steady state vLLM reaches after its first
rearrangement, from the router's long-run loads (``simulator.moe_routing``): a trace's weights,
else even loads (a per-step draw has no lasting hot experts to learn). Not modelled: the steps
before the first rearrangement (vLLM's linear placement), the weight transfers of each
rearrangement, and the recording kernel.
"""

from __future__ import annotations

import numpy as np


def balanced_packing(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack the items of ``weight`` [n] into ``num_packs`` packs of n / num_packs items each,
    heaviest first into the lightest open pack: (pack index, rank in pack) per item."""
    n = weight.size
    per_pack = n // num_packs
    if per_pack == 1:
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    pack_index = np.full(n, -1, dtype=np.int64)
    rank_in_pack = np.full(n, -1, dtype=np.int64)
    pack_weights = np.zeros(num_packs)
    pack_items = np.zeros(num_packs, dtype=np.int64)
    for item in np.argsort(-weight):
        pack = int(np.argmin(pack_weights))
        pack_index[item], rank_in_pack[item] = pack, pack_items[pack]
        pack_weights[pack] += weight[item]
        pack_items[pack] += 1
        if pack_items[pack] == per_pack:
            pack_weights[pack] = np.inf
    return pack_index, rank_in_pack


def replicate_experts(weight: np.ndarray, num_phy: int) -> tuple[np.ndarray, np.ndarray]:
    """``num_phy`` replicas of the ``weight.size`` experts, each extra one to the expert with the
    highest load per replica: (logical expert of each replica, replicas per expert)."""
    num_log = weight.size
    phy2log = np.arange(num_phy, dtype=np.int64)
    logcnt = np.ones(num_log, dtype=np.int64)
    for i in range(num_log, num_phy):
        e = int(np.argmax(weight / logcnt))
        phy2log[i] = e
        logcnt[e] += 1
    return phy2log, logcnt


def _inverse(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size, dtype=np.int64)
    return inv


def _hierarchical(weight: np.ndarray, num_phy: int, num_groups: int, num_nodes: int, num_gpus: int) -> np.ndarray:
    num_log = weight.size
    group_size = num_log // num_groups
    groups_per_node = num_groups // num_nodes
    phy_per_gpu = num_phy // num_gpus
    # 1: expert groups packed to nodes
    group_pack, group_rank = balanced_packing(weight.reshape(num_groups, group_size).sum(axis=-1), num_nodes)
    log2mlog = (((group_pack * groups_per_node + group_rank)[:, None] * group_size)
                + np.arange(group_size, dtype=np.int64)).reshape(-1)
    mlog2log = _inverse(log2mlog)
    # 2: replicas within each node
    tokens_per_mlog = weight[mlog2log].reshape(num_nodes, -1)
    phy2mlog, mlogcnt = zip(*(replicate_experts(row, num_phy // num_nodes) for row in tokens_per_mlog))
    phy2mlog, mlogcnt = np.stack(phy2mlog), np.stack(mlogcnt)
    # 3: replicas packed to the node's GPUs
    out = []
    for node in range(num_nodes):
        tokens_per_phy = (tokens_per_mlog[node] / mlogcnt[node])[phy2mlog[node]]
        pack, rank = balanced_packing(tokens_per_phy, num_gpus // num_nodes)
        pphy2phy = _inverse(pack * phy_per_gpu + rank)
        out.append(phy2mlog[node][pphy2phy] + node * (num_log // num_nodes))
    return mlog2log[np.concatenate(out)]


def eplb_placement(weight: np.ndarray, num_physical: int, num_ranks: int, num_groups: int = 1,
                   num_nodes: int = 1) -> np.ndarray:
    """The logical expert of every physical slot (slot i on rank i // (num_physical / num_ranks)),
    as vLLM's ``DefaultEplbPolicy.rebalance_experts`` places them for per-expert loads ``weight``:
    hierarchical when ``num_groups`` expert groups divide over ``num_nodes`` nodes, else global."""
    weight = np.asarray(weight, dtype=np.float64)
    if num_physical < weight.size or num_physical % num_ranks:
        raise ValueError(f"eplb_placement: {num_physical} physical experts for {weight.size} experts on "
                         f"{num_ranks} ranks; need at least one slot per expert and the ranks to divide the slots")
    if num_ranks % num_nodes:                     # vLLM: "not using hierarchical rearrangement"
        num_nodes = 1
    if num_groups < 1 or weight.size % num_groups or num_groups % num_nodes:
        num_groups = num_nodes = 1
    return _hierarchical(weight, num_physical, num_groups, num_nodes, num_ranks)
