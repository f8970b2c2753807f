"""KV-cache transfer P -> D: an explicit cross-role event with link sharing.

A transfer moves one request's prompt KV from a prefill engine to a decode
engine. Every GPU of the pair works in parallel on its own shard (TP rank
pairs, PP stage pairs), so a transfer is priced on ONE GPU's share: the
caller passes ``num_bytes`` = tokens x bytes per token on the busiest GPU of
either side (see ``simulator.control_plane.kv_pull``).

Timeline of one transfer::

    start ──latency_s──▶ data phase: rate = fair share of its ports ──▶ done (on_done())

Sharing (processor sharing, max-min fair): a transfer uses two ports, the
sender's egress and the receiver's ingress on the link's medium
(``Link.src_port`` / ``Link.dst_port``, each of capacity
``Link.bandwidth_bytes_per_s``). Rates are max-min fair over the ports
(water-filling): two transfers on the same pair each get half, so each takes
twice as long. Rates and finish times are recomputed exactly whenever a data
phase starts or ends; between those instants rates are constant.

``TransferModel`` is the protocol a replacement (a network simulator, the
comm backend of DESIGN.md §2) implements: ``start`` and a completion callback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from simulator.events import PRIO_TRANSFER, EventLoop

_EPS_BYTES = 1e-6      # a flow with fewer bytes left than this is done (float round-off)


@dataclass(frozen=True)
class Link:
    """Path of one transfer: ports at both ends, their bandwidth (bytes/s, one direction) and a latency floor."""

    src_port: str
    dst_port: str
    bandwidth_bytes_per_s: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"link bandwidth must be > 0 bytes/s, got {self.bandwidth_bytes_per_s!r}")
        if self.latency_s < 0:
            raise ValueError(f"link latency must be >= 0 s, got {self.latency_s!r}")


class TransferModel(Protocol):
    def start(self, key: str, link: Link, num_bytes: float, on_done: Callable[[], None]) -> None:
        """Begin moving ``num_bytes`` over ``link`` now; call ``on_done()`` when the last byte lands."""


@dataclass(slots=True)
class _Flow:
    key: str
    link: Link
    remaining: float
    on_done: Callable[[], None]
    rate: float = 0.0


class SharedLinkTransfers:
    """Exact processor sharing of port bandwidth among concurrent transfers (see module doc)."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self._flows: dict[str, _Flow] = {}
        self._port_flows: dict[str, dict[str, _Flow]] = {}     # port -> its flows in the data phase, by key
        self._last_s = 0.0
        self._version = 0           # invalidates completion events scheduled before a change
        self.num_started = 0

    def start(self, key: str, link: Link, num_bytes: float, on_done: Callable[[], None]) -> None:
        if num_bytes < 0:
            raise ValueError(f"transfer {key!r}: num_bytes={num_bytes!r} must be >= 0")
        if key in self._flows:
            raise ValueError(f"transfer {key!r} is already in flight")
        self.num_started += 1
        flow = _Flow(key, link, float(num_bytes), on_done)
        self.loop.at(self.loop.now_s + link.latency_s, lambda: self._begin_data(flow), PRIO_TRANSFER)

    def active(self) -> dict[str, float]:
        """Current rate (bytes/s) of every transfer in its data phase."""
        return {k: f.rate for k, f in self._flows.items()}

    # ------------------------------------------------------------------ internals
    def _advance(self) -> None:
        now = self.loop.now_s
        dt = now - self._last_s
        if dt > 0:
            for f in self._flows.values():
                f.remaining -= f.rate * dt
        self._last_s = now

    def _begin_data(self, flow: _Flow) -> None:
        self._advance()
        self._flows[flow.key] = flow
        port_flows = self._port_flows
        for port in (flow.link.src_port, flow.link.dst_port):
            if port in port_flows:
                port_flows[port][flow.key] = flow
            else:
                port_flows[port] = {flow.key: flow}
        self._reschedule(flow)

    def _reschedule(self, started: _Flow | None = None) -> None:
        """Finish flows that are done, recompute the fair rates of the flows they shared ports
        with (and of ``started``'s), schedule the next completion."""
        flows = self._flows
        done = [f for f in flows.values() if f.remaining <= _EPS_BYTES]
        port_flows = self._port_flows
        for f in done:
            del flows[f.key]
            for port in (f.link.src_port, f.link.dst_port):
                on_port = port_flows[port]
                if len(on_port) == 1:
                    del port_flows[port]
                else:
                    del on_port[f.key]
        if started is not None and not done and len(self._port_flows[started.link.src_port]) == 1 \
                and len(self._port_flows[started.link.dst_port]) == 1:
            started.rate = started.link.bandwidth_bytes_per_s      # a start on two ports of its own
        else:
            self._set_rates_around(done if started is None else [*done, started])
        self._version += 1
        if flows:
            version = self._version
            now = self.loop.now_s
            t = now + min([f.remaining / f.rate for f in flows.values()])    # = min(now + ...): rounding is monotone
            self.loop.at(t if t > now else now, lambda: self._on_tick(version), PRIO_TRANSFER)
        for f in done:
            f.on_done()

    def _on_tick(self, version: int) -> None:
        if version != self._version:
            return                  # superseded by a later start/end
        self._advance()
        flows = list(self._flows.values())
        left_s = [f.remaining / f.rate for f in flows]
        nearest = flows[left_s.index(min(left_s))]          # the first of the nearest
        nearest.remaining = min(nearest.remaining, 0.0)     # the event was computed for it
        self._reschedule()

    def _set_rates_around(self, changed: list[_Flow]) -> None:
        """Max-min fair rates of the flows that share a component (ports linked by flows) with a
        ``changed`` flow, the only ones whose rates a start or end can change: the water-filling
        of a union of components is exact (each keeps its rounds, in the same order), as is a
        lone flow on ports of its own getting its link's bandwidth."""
        port_flows = self._port_flows
        ports = [q for f in changed for q in (f.link.src_port, f.link.dst_port) if q in port_flows]
        if not ports:
            return
        seen = set(ports)
        component: dict[str, _Flow] = {}
        while ports:
            for f in port_flows[ports.pop()].values():
                if f.key not in component:
                    component[f.key] = f
                    for q in (f.link.src_port, f.link.dst_port):
                        if q not in seen:
                            seen.add(q)
                            ports.append(q)
        flows = list(component.values())
        if len(flows) == 1:
            flows[0].rate = flows[0].link.bandwidth_bytes_per_s
        elif _is_star(flows):
            # One port (the hub) carries all k flows, one bandwidth: every other port carries at
            # most k, so the first round picks a hub (share bandwidth / k, the smallest; another
            # hub ties at the same share) and fixes every flow at that share.
            rate = flows[0].link.bandwidth_bytes_per_s / len(flows)
            for f in flows:
                f.rate = rate
        else:
            self._water_fill(flows)

    def _water_fill(self, flows: list[_Flow] | None = None) -> None:
        """Max-min fair rates of ``flows`` (default: all) by water-filling over their ports
        (deterministic: ties by port name).

        Each round fixes every unfixed flow through the port with the smallest fair share
        (capacity left / unfixed users), in key order, and takes that share off both its ports.
        Flows are indexed by port, so a round visits only the chosen port's flows."""
        capacity: dict[str, float] = {}
        users: dict[str, int] = {}
        by_port: dict[str, list[_Flow]] = {}
        for f in sorted(self._flows.values() if flows is None else flows, key=_flow_key):
            for port in (f.link.src_port, f.link.dst_port):
                capacity[port] = f.link.bandwidth_bytes_per_s
                users[port] = users.get(port, 0) + 1
                by_port.setdefault(port, []).append(f)
        fixed: set[str] = set()
        while users:
            port = min(users, key=lambda p: (capacity[p] / users[p], p))
            share = capacity[port] / users[port]
            for f in by_port[port]:
                if f.key in fixed:
                    continue
                fixed.add(f.key)
                f.rate = share
                for q in (f.link.src_port, f.link.dst_port):
                    capacity[q] -= share
                    users[q] -= 1
            for q in [q for q, n in users.items() if n == 0]:
                del users[q]


def _flow_key(f: _Flow) -> str:
    return f.key


def _is_star(flows: list[_Flow]) -> bool:
    """Whether one port carries all of ``flows`` and they have one bandwidth."""
    links = [f.link for f in flows]
    return len({link.bandwidth_bytes_per_s for link in links}) == 1 and (
        len({link.src_port for link in links}) == 1 or len({link.dst_port for link in links}) == 1)
