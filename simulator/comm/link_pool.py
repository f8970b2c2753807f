"""`LinkPool`: transfers sharing one link, processor-sharing style.

Every transfer in flight gets an equal share of the link: with k active transfers each
drains at `bandwidth_bytes_per_s / k`. When its bytes are drained a transfer still pays
the link latency once (`latency_s`, not bandwidth-sharing) and then lands.

    bytes left
    B ─┐ t1 alone            t1 + t2 share          t1 alone again
       │╲ full rate          ╲ half rate each       ╲
       │  ╲____________________╲______________________╲__ 0 -> lands latency_s later
       └──────────────────────────────────────────────────── time

One pool per physical link (one NIC direction, one NVLink port, a PCIe switch): the
caller decides which transfers contend. Build it from a backend:
`LinkPool(backend.link_bandwidth_bytes_per_s("network"), backend.link_latency_s("network"))`.

Use with the event loop (the pool holds no loop; times are absolute seconds):

    pool.add(now_s, key, nbytes)        # start a transfer
    t = pool.next_landing_s()           # schedule ONE wake-up at t (drop stale ones by
                                        # comparing pool.version to the value at scheduling)
    for key in pool.pop_landed(now_s):  # at the wake-up: transfers that have landed
        ...; then schedule the next wake-up again
    pool.remove(now_s, key)             # cancel (e.g. request aborted)

Every mutating call first advances the pool to `now_s`; time must not go backwards.
"""

from __future__ import annotations

from typing import Hashable

_EPS_BYTES = 1e-6


class LinkPool:
    """Equal-share bandwidth among active transfers on one link."""

    def __init__(self, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> None:
        if bandwidth_bytes_per_s <= 0 or latency_s < 0:
            raise ValueError(f"LinkPool needs bandwidth > 0 and latency >= 0; got "
                             f"{bandwidth_bytes_per_s}, {latency_s}")
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.latency_s = latency_s
        self.now_s = 0.0
        self.version = 0                               # bumped whenever landing times may change
        self._left: dict[Hashable, float] = {}         # draining: key -> bytes left
        self._landing: dict[Hashable, float] = {}      # drained: key -> landing time (s)

    @property
    def num_active(self) -> int:
        """Transfers still draining (sharing the bandwidth)."""
        return len(self._left)

    def rate_bytes_per_s(self) -> float:
        """Rate each draining transfer gets now."""
        return self.bandwidth_bytes_per_s / max(1, len(self._left))

    def add(self, now_s: float, key: Hashable, nbytes: float) -> None:
        if key in self._left or key in self._landing:
            raise ValueError(f"LinkPool: transfer {key!r} is already in flight")
        if nbytes < 0:
            raise ValueError(f"LinkPool: transfer {key!r} has {nbytes} bytes; need >= 0")
        self.advance(now_s)
        if nbytes <= _EPS_BYTES:
            self._landing[key] = now_s + self.latency_s
        else:
            self._left[key] = float(nbytes)
        self.version += 1

    def remove(self, now_s: float, key: Hashable) -> None:
        self.advance(now_s)
        if self._left.pop(key, None) is None and self._landing.pop(key, None) is None:
            raise ValueError(f"LinkPool: no transfer {key!r} in flight")
        self.version += 1

    def advance(self, now_s: float) -> None:
        """Drain bytes up to `now_s`, moving finished transfers to the landing set."""
        if now_s < self.now_s - 1e-12:
            raise ValueError(f"LinkPool: time went backwards ({now_s} < {self.now_s})")
        while self._left and now_s > self.now_s:
            k = len(self._left)
            rate = self.bandwidth_bytes_per_s / k
            first = min(self._left.values())
            drain_s = first / rate
            step_s = min(drain_s, now_s - self.now_s)
            t = self.now_s + step_s
            for key in list(self._left):
                self._left[key] -= step_s * rate
                if self._left[key] <= _EPS_BYTES or (step_s == drain_s and self._left[key] <= first * 1e-12):
                    del self._left[key]
                    self._landing[key] = t + self.latency_s
            self.now_s = t
        self.now_s = max(self.now_s, now_s)

    def next_landing_s(self) -> float | None:
        """When the next transfer lands if nothing else is added or removed; None when idle."""
        times = list(self._landing.values())
        if self._left:
            rate = self.bandwidth_bytes_per_s / len(self._left)
            times.append(self.now_s + min(self._left.values()) / rate + self.latency_s)
        return min(times) if times else None

    def pop_landed(self, now_s: float) -> list[Hashable]:
        """Keys of transfers landed by `now_s`, in landing order (ties: insertion order)."""
        self.advance(now_s)
        done = sorted((t, i, k) for i, (k, t) in enumerate(self._landing.items()) if t <= now_s + 1e-12)
        for _, _, key in done:
            del self._landing[key]
        if done:
            self.version += 1
        return [k for _, _, k in done]
