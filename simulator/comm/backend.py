"""`CommBackend`: the fidelity plane's communication service (DESIGN.md §2).

The batch engine and the cluster roles ask a backend two questions, both on idle links:

* `collective_time_s(kind, message_bytes, group)` — one collective of `kind`
  ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p") over `group`;
  `message_bytes` follows `frontier.ops.CommOp.bytes` (all_reduce: the reduced tensor;
  all_gather: the gathered output; reduce_scatter: the input; all_to_all: what one rank
  sends in total; p2p: the message).
* `moe_a2a_time_s(moe, message_bytes, group)` — one MoE dispatch or combine kernel
  (`frontier.ops.MoeA2a`: the kernel, the tokens each rank dispatches, hidden size, top-k) over
  the EP `group`; `message_bytes`: the busiest rank's routed bytes (the all_to_all it amounts to).
* `transfer_time_s(message_bytes, src, dst)` — one point-to-point copy between two GPUs.

Concurrent transfers sharing a link are not the backend's business: put them on a
`simulator.comm.LinkPool`, built from `link_bandwidth_bytes_per_s(link)` and
`link_latency_s(link)` of the backend. An external network simulator plugs in by
implementing these methods.

Implementations: `AnalyticalCommBackend` (alpha-beta ring/tree, hierarchical across
nodes) and `CalibratedCommBackend` (measured AIConfigurator tables, analytical outside
them). `make_comm_backend("analytical" | "calibrated", gpu)` builds either.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from simulator.comm.group import CommGroup, Endpoint

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from frontier.ops import MoeA2a

COMM_MODELS = ("analytical", "calibrated")


class CommBackend(Protocol):
    """Times of collectives and transfers on idle links, in seconds."""

    name: str

    def collective_time_s(self, kind: str, message_bytes: float, group: CommGroup) -> float: ...

    def moe_a2a_time_s(self, moe: MoeA2a, message_bytes: float, group: CommGroup) -> float: ...

    def transfer_time_s(self, message_bytes: float, src: Endpoint, dst: Endpoint) -> float: ...

    def link_bandwidth_bytes_per_s(self, link: str) -> float: ...

    def link_latency_s(self, link: str) -> float: ...


def make_comm_backend(comm_model: str, gpu: GpuSpec, data_root: Path | None = None,
                      cache_dir: Path | None = None) -> CommBackend:
    """The backend `--comm-model` names. "calibrated" imports the AIC comm tables for `gpu`
    on first use into `cache_dir` (default ~/.cache/frontier/profiles); see
    `simulator.comm.calibrated.load_calibrated_backend`."""
    if comm_model == "analytical":
        from simulator.comm.analytical import AnalyticalCommBackend
        return AnalyticalCommBackend(gpu)
    if comm_model == "calibrated":
        from simulator.comm.calibrated import load_calibrated_backend
        return load_calibrated_backend(gpu, data_root=data_root, cache_dir=cache_dir)
    raise ValueError(f"--comm-model {comm_model!r}; valid: {', '.join(COMM_MODELS)}")
