"""SharedLinkTransfers._water_fill (flows indexed by port) gives the rates of the plain water-filling."""

import random

from simulator.events import EventLoop
from simulator.kv_transfer import Link, SharedLinkTransfers, _Flow


def _reference_rates(flows: list[_Flow]) -> dict[str, float]:
    """Water-filling written plainly: every round scans all unfixed flows in key order."""
    unfixed = sorted(flows, key=lambda f: f.key)
    capacity: dict[str, float] = {}
    users: dict[str, int] = {}
    rates: dict[str, float] = {}
    for f in unfixed:
        for port in (f.link.src_port, f.link.dst_port):
            capacity[port] = f.link.bandwidth_bytes_per_s
            users[port] = users.get(port, 0) + 1
    while unfixed:
        port = min((p for p in users if users[p] > 0), key=lambda p: (capacity[p] / users[p], p))
        share = capacity[port] / users[port]
        keep = []
        for f in unfixed:
            if port in (f.link.src_port, f.link.dst_port):
                rates[f.key] = share
                for q in (f.link.src_port, f.link.dst_port):
                    capacity[q] -= share
                    users[q] -= 1
            else:
                keep.append(f)
        unfixed = keep
    return rates


def test_indexed_water_filling_equals_the_plain_one_on_random_flows():
    rng = random.Random(3)
    for _ in range(300):
        transfers = SharedLinkTransfers(EventLoop())
        n_src, n_dst = rng.randint(1, 6), rng.randint(1, 6)
        bws = [rng.choice([25e9, 50e9, 400e9 / 3]) for _ in range(n_src + n_dst)]
        flows = []
        for i in range(rng.randint(1, 30)):
            s, d = rng.randrange(n_src), rng.randrange(n_dst)
            bw = bws[s] if rng.random() < 0.5 else bws[n_src + d]   # mixed bandwidths on a port
            flows.append(_Flow(f"r{rng.randrange(1000)}-{i}", Link(f"P{s}.out", f"D{d}.in", bw), 1e6, lambda: None))
        transfers._flows = {f.key: f for f in flows}
        transfers._water_fill()
        assert transfers.active() == _reference_rates(flows)
