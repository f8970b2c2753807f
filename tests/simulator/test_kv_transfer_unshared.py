"""SharedLinkTransfers' rates as flows start one by one (``_set_rates_around``): flows with ports
of their own get their link's bandwidth and the rest are water-filled among themselves; exactly
the water-filling of all flows."""

import random

from simulator.events import EventLoop
from simulator.kv_transfer import Link, SharedLinkTransfers, _Flow


def _flows(rng: random.Random, shared: bool) -> list[_Flow]:
    """n flows over P and D ports; shared: drawn from few ports (some shared, some not)."""
    n = rng.randint(1, 10)
    k = rng.randint(1, 2 * n) if shared else 2 * n
    src = rng.sample(range(2 * n), n) if not shared else [rng.randrange(k) for _ in range(n)]
    dst = rng.sample(range(2 * n), n) if not shared else [rng.randrange(k) for _ in range(n)]
    return [_Flow(f"r{rng.randrange(1000)}-{i}", Link(f"P{src[i]}", f"D{dst[i]}",
                                                     rng.choice([25e9, 50e9, 400e9 / 3, 1e9 / 7])),
                  1e6, lambda: None) for i in range(n)]


def _rates(flows: list[_Flow], general: bool) -> dict[str, float]:
    t = SharedLinkTransfers(EventLoop())
    for f in flows:
        f.rate = -1.0
        if general:
            t._flows[f.key] = f
        else:
            t._begin_data(f)        # the production path: rates of the changed component
    if general:
        t._water_fill()
    return {f.key: f.rate for f in flows}


def test_unshared_ports_get_exactly_the_water_filling_rates():
    rng = random.Random(5)
    for _ in range(300):
        flows = _flows(rng, shared=rng.random() < 0.5)
        assert _rates(flows, general=False) == _rates(flows, general=True)


def test_unshared_flows_run_at_their_link_bandwidth_and_shared_ones_split():
    a = _Flow("a", Link("p0", "d0", 50e9), 1e6, lambda: None)
    b = _Flow("b", Link("p1", "d1", 25e9), 1e6, lambda: None)
    assert _rates([a, b], general=False) == {"a": 50e9, "b": 25e9}
    c = _Flow("c", Link("p2", "d0", 50e9), 1e6, lambda: None)
    assert _rates([a, c], general=False) == {"a": 25e9, "c": 25e9}
