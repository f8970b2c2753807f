"""Analytical collectives: alpha-beta cost of ring / tree algorithms per link class,
composed hierarchically when a group spans nodes.

One flat collective of n ranks on one link class L (`flat_time_s`):

    time = ALPHA_S[L] + (steps - 1) * HOP_S[L] + wire_bytes / (bw_L * EFF[L])

    kind            algorithm   steps           wire bytes per rank (S = CommOp.bytes)
    all_reduce      ring        2(n-1)          2(n-1)/n * S
                    tree        2 ceil(log2 n)  2 S          (min of ring and tree is taken)
    all_gather      ring        n-1             (n-1)/n * S  (S = gathered output)
    reduce_scatter  ring        n-1             (n-1)/n * S  (S = input)
    all_to_all      pairwise    1               (n-1)/n * S  (n-1 concurrent sends)
    p2p             direct      1               S

`ALPHA_S` is the fixed cost of one collective (launch + first hop + sync); `HOP_S` the
extra latency of each further algorithm step. Inside a node the hop term is 0: vLLM's
custom all-reduce / symmetric-memory collectives reach every peer directly over NVSwitch
(one-shot / two-shot), so their latency does not grow with the ring length. With HOP_S = 0
the ring always wins and in-node numbers equal the pre-package roofline formula.

A group spanning nodes (`ranks_per_node = g`, `m` nodes) runs hierarchically, as NCCL's
tree/NVLS-tree and vLLM's two-level schemes do; each of the g GPUs of a node drives its own
NIC, so the g inter-node pieces run concurrently on separate links:

    all_reduce(S):     intra reduce_scatter(S, g) + inter all_reduce(S/g, m) + intra all_gather(S, g)
    all_gather(S):     inter all_gather(S/g, m)   + intra all_gather(S, g)
    reduce_scatter(S): intra reduce_scatter(S, g) + inter reduce_scatter(S/g, m)
    all_to_all(S):     max(intra share (g-1)/n * S, inter share (n-g)/n * S), sent concurrently
"""

from __future__ import annotations

import math

from frontier.gpu import GpuSpec
from frontier.ops import MoeA2a
from simulator.comm.group import CommGroup, Endpoint, intra_node_link

COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
LINK_CLASSES = ("nvlink", "pcie", "network")

# --- efficiency and latency constants ------------------------------------------------------
# Bus bandwidth reached as a fraction of the per-GPU one-direction link rate: NCCL / custom
# all-reduce reach ~80 % of NVLink (nccl-tests on 8xH100: ~360 of 450 GB/s busbw at >= 64 MB),
# PCIe peer copies ~80 %, IB/RoCE NICs ~85 % of line rate (NDR 400 Gb/s -> ~42 GB/s).
LINK_EFF = {"nvlink": 0.80, "pcie": 0.80, "network": 0.85}
# Fixed cost of one collective: custom all-reduce on NVLink ~5-8 us (AIC 8xH100 graph rows:
# 4.7 us at 256 B); PCIe peer path ~10 us (AIC systems yaml p2p_latency); NCCL over the
# network ~20-30 us.
ALPHA_S = {"nvlink": 6e-6, "pcie": 10e-6, "network": 25e-6}
# Extra latency per further algorithm step: 0 in a node (see module doc); ~5 us per
# inter-node step (RDMA write + NCCL proxy progress, NCCL's own tuning model uses 2-14 us).
HOP_S = {"nvlink": 0.0, "pcie": 0.0, "network": 5e-6}


def _steps_and_wire(kind: str, n: int, message_bytes: float) -> list[tuple[int, float]]:
    """Candidate (steps, wire bytes per rank) of the algorithms NCCL may pick for `kind`."""
    if kind == "all_reduce":
        return [(2 * (n - 1), 2.0 * (n - 1) / n * message_bytes),
                (2 * math.ceil(math.log2(n)), 2.0 * message_bytes)]
    if kind in ("all_gather", "reduce_scatter"):
        return [(n - 1, (n - 1) / n * message_bytes)]
    if kind == "all_to_all":
        return [(1, (n - 1) / n * message_bytes)]
    if kind == "p2p":
        return [(1, message_bytes)]
    raise ValueError(f"collective kind {kind!r}; valid: {COLLECTIVE_KINDS}")


class AnalyticalCommBackend:
    """Prices collectives from link bandwidths of `gpu` and the constants above."""

    name = "analytical"

    def __init__(self, gpu: GpuSpec) -> None:
        self.gpu = gpu
        self._bw = {"nvlink": gpu.nvlink_bw_bytes_per_s, "pcie": gpu.nvlink_bw_bytes_per_s,
                    "network": gpu.network_bw_bytes_per_s}

    # ---- links -------------------------------------------------------------------------------
    def link_bandwidth_bytes_per_s(self, link: str) -> float:
        """Effective (efficiency-scaled) one-direction bandwidth of one GPU on `link`."""
        if link not in LINK_CLASSES:
            raise ValueError(f"link {link!r}; valid: {LINK_CLASSES}")
        return self._bw[link] * LINK_EFF[link]

    def link_latency_s(self, link: str) -> float:
        if link not in LINK_CLASSES:
            raise ValueError(f"link {link!r}; valid: {LINK_CLASSES}")
        return ALPHA_S[link]

    def link_between(self, src: Endpoint, dst: Endpoint) -> str:
        return intra_node_link(self.gpu) if src.node == dst.node else "network"

    # ---- CommBackend -------------------------------------------------------------------------
    def transfer_time_s(self, message_bytes: float, src: Endpoint, dst: Endpoint) -> float:
        """One point-to-point copy on an idle link; 0 when src == dst."""
        if src == dst:
            return 0.0
        return self.flat_time_s("p2p", message_bytes, 2, self.link_between(src, dst))

    def moe_a2a_time_s(self, moe: MoeA2a, message_bytes: float, group: CommGroup) -> float:
        """An MoE dispatch or combine kernel: the all_to_all of its routed bytes."""
        return self.collective_time_s("all_to_all", message_bytes, group)

    def collective_time_s(self, kind: str, message_bytes: float, group: CommGroup) -> float:
        if group.size == 1 and kind != "p2p":
            return 0.0
        if kind == "p2p":
            return self.flat_time_s("p2p", message_bytes, 2,
                                    group.intra_link if group.in_one_node else group.inter_link)
        g, m = group.ranks_per_node, group.num_nodes
        intra, inter = group.intra_link, group.inter_link
        if m == 1:
            return self.flat_time_s(kind, message_bytes, g, intra)
        if g == 1:
            return self.flat_time_s(kind, message_bytes, m, inter)
        return self.hierarchical_time_s(kind, message_bytes, group, self.flat_time_s)

    @staticmethod
    def hierarchical_time_s(kind: str, message_bytes: float, group: CommGroup, flat) -> float:
        """Two-level composition (module doc); `flat(kind, bytes, n, link)` prices each piece."""
        g, m, n = group.ranks_per_node, group.num_nodes, group.size
        intra, inter, s = group.intra_link, group.inter_link, message_bytes
        if kind == "all_reduce":
            return (flat("reduce_scatter", s, g, intra) + flat("all_reduce", s / g, m, inter)
                    + flat("all_gather", s, g, intra))
        if kind == "all_gather":
            return flat("all_gather", s / g, m, inter) + flat("all_gather", s, g, intra)
        if kind == "reduce_scatter":
            return flat("reduce_scatter", s, g, intra) + flat("reduce_scatter", s / g, m, inter)
        if kind == "all_to_all":   # wire (g-1)/n * S on NVLink and (n-g)/n * S on the NIC, concurrently
            return max(flat("all_to_all", s * g / n, g, intra), flat("all_to_all", s, m, inter))
        raise ValueError(f"collective kind {kind!r}; valid: {COLLECTIVE_KINDS}")

    def flat_time_s(self, kind: str, message_bytes: float, n: int, link: str) -> float:
        """One single-level collective of n ranks on one link class (module doc table)."""
        if n == 1 and kind != "p2p":
            return 0.0
        bw = self.link_bandwidth_bytes_per_s(link)
        return min(ALPHA_S[link] + (steps - 1) * HOP_S[link] + wire / bw
                   for steps, wire in _steps_and_wire(kind, n, message_bytes))
