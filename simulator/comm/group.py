"""`CommGroup`: the shape of one communicator — how many ranks, how they sit on nodes,
and which link class joins them — and `Endpoint`, one GPU's place for point-to-point.

Placement (`ranks_per_node`): the group's ranks are spread evenly over
`num_nodes = size // ranks_per_node` nodes. vLLM numbers ranks node by node, so a
TP / TP x DP group is *packed* (`CommGroup.packed`): ranks_per_node = min(size,
gpus_per_node). A group whose members sit one per node (e.g. pipeline peers when a
stage fills a node) has ranks_per_node = 1.

    size 16, gpus_per_node 8, packed          size 4, one rank per node
    node 0: r0 .. r7  ─┐                       node 0: r0 ─┐
    node 1: r8 .. r15 ─┘ network               node 1: r1  ├─ network (flat)
                                               node 2: r2  │
                                               node 3: r3 ─┘

Link classes: inside a node "nvlink" (NVSwitch / NVLink) or "pcie" (GPUs without
NVLink; the catalogue lists their PCIe peer bandwidth as `nvlink_bw_bytes_per_s`);
between nodes "network" (one NIC per GPU, `network_bw_bytes_per_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from frontier.gpu import intra_node_link   # the link rule lives with the catalogue (frontier.gpu)

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from frontier.ops import CommOp

INTRA_LINKS = ("nvlink", "pcie")
INTER_LINKS = ("network",)


@dataclass(frozen=True)
class CommGroup:
    """`size` ranks, `ranks_per_node` of them on each of `num_nodes` nodes of `gpus_per_node` GPUs."""

    size: int
    gpus_per_node: int
    ranks_per_node: int
    intra_link: str = "nvlink"
    inter_link: str = "network"

    def __post_init__(self) -> None:
        if self.size < 1 or self.gpus_per_node < 1 or self.ranks_per_node < 1:
            raise ValueError(f"CommGroup needs size, gpus_per_node, ranks_per_node >= 1; got "
                             f"{self.size}, {self.gpus_per_node}, {self.ranks_per_node}")
        if self.ranks_per_node > min(self.size, self.gpus_per_node) or self.size % self.ranks_per_node:
            raise ValueError(f"CommGroup: ranks_per_node={self.ranks_per_node} must divide size={self.size} "
                             f"and be <= gpus_per_node={self.gpus_per_node}")
        if self.intra_link not in INTRA_LINKS:
            raise ValueError(f"CommGroup.intra_link={self.intra_link!r}; valid: {INTRA_LINKS}")
        if self.inter_link not in INTER_LINKS:
            raise ValueError(f"CommGroup.inter_link={self.inter_link!r}; valid: {INTER_LINKS}")

    @property
    def num_nodes(self) -> int:
        return self.size // self.ranks_per_node

    @property
    def in_one_node(self) -> bool:
        return self.num_nodes == 1

    @classmethod
    def packed(cls, size: int, gpus_per_node: int, intra_link: str = "nvlink") -> CommGroup:
        """Consecutive ranks, node by node (vLLM's TP and TP x DP groups)."""
        per_node = min(size, gpus_per_node)
        if size % per_node:
            raise ValueError(f"CommGroup.packed: size={size} is not a multiple of gpus_per_node={gpus_per_node}")
        return cls(size, gpus_per_node, per_node, intra_link)

    @classmethod
    def from_op(cls, op: CommOp, gpu: GpuSpec) -> CommGroup:
        """The group a `CommOp` describes on `gpu` nodes.

        `op.ranks_per_node` > 0: topology-aware, `op.link` names the intra-node link.
        Otherwise legacy flat ops: link "network" = every rank on its own node; "nvlink" /
        "pcie" = the whole group inside one NVLink / PCIe domain.
        """
        if op.ranks_per_node:
            intra = op.link if op.link in INTRA_LINKS else intra_node_link(gpu)
            return cls(op.group_size, max(gpu.gpus_per_node, op.ranks_per_node), op.ranks_per_node, intra)
        if op.link == "network":
            return cls(op.group_size, gpu.gpus_per_node, 1, intra_node_link(gpu))
        return cls(op.group_size, max(gpu.gpus_per_node, op.group_size), op.group_size, op.link)


@dataclass(frozen=True)
class Endpoint:
    """One GPU: `node` index and `gpu` index within the node."""

    node: int
    gpu: int = 0

    def __post_init__(self) -> None:
        if self.node < 0 or self.gpu < 0:
            raise ValueError(f"Endpoint needs node, gpu >= 0; got {self.node}, {self.gpu}")
