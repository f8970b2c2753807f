"""SharedLinkTransfers recomputes, on a start or an end, only the rates of the flows in the
changed flows' components; after every event the rates equal the water-filling of all flows."""

import random

from simulator.events import EventLoop
from simulator.kv_transfer import Link, SharedLinkTransfers


class _Checked(SharedLinkTransfers):
    """After every reschedule: the rates equal those of `_water_fill` over all flows."""

    checks = 0
    max_flows = 0

    def _reschedule(self, started=None) -> None:
        super()._reschedule(started)
        rates = self.active()
        self._water_fill()
        assert self.active() == rates
        self.checks += 1
        self.max_flows = max(self.max_flows, len(rates))


def _run(seed: int) -> tuple[_Checked, dict[str, float]]:
    rng = random.Random(seed)
    loop = EventLoop()
    transfers = _Checked(loop)
    n_src, n_dst = rng.randint(1, 5), rng.randint(1, 5)
    bws = [rng.choice([25e9, 50e9, 400e9 / 3]) for _ in range(n_src + n_dst)]
    done: dict[str, float] = {}
    for i in range(rng.randint(1, 40)):
        s, d = rng.randrange(n_src), rng.randrange(n_dst)
        bw = bws[s] if rng.random() < 0.5 else bws[n_src + d]    # mixed bandwidths on a port
        link = Link(f"P{s}.out", f"D{d}.in", bw, rng.choice([0.0, 1e-6, 5e-6]))
        key = f"r{i}"
        start_s = rng.choice([0.0, 1e-5, rng.uniform(0, 1e-3)])   # some start together
        nbytes = rng.choice([0, 1e4, rng.uniform(1e3, 1e7)])
        loop.at(start_s, lambda key=key, link=link, nbytes=nbytes: transfers.start(
            key, link, nbytes, lambda key=key: done.__setitem__(key, loop.now_s)), 2)
    loop.run()
    return transfers, done


def test_rates_after_every_start_and_end_equal_the_global_water_filling():
    checks = max_flows = 0
    for seed in range(200):
        transfers, done = _run(seed)
        assert not transfers.active() and len(done) == transfers.num_started
        checks += transfers.checks
        max_flows = max(max_flows, transfers.max_flows)
    assert checks > 2000 and max_flows >= 15


def test_two_flows_on_one_port_split_it_and_an_unrelated_one_keeps_its_link():
    loop = EventLoop()
    t = SharedLinkTransfers(loop)
    ends: dict[str, float] = {}
    for key, src, dst in (("a", "p0", "d0"), ("b", "p1", "d0"), ("c", "p2", "d2")):
        t.start(key, Link(src, dst, 1e9), 1e6, lambda key=key: ends.__setitem__(key, loop.now_s))
    loop.run(until_s=0.0)
    assert t.active() == {"a": 5e8, "b": 5e8, "c": 1e9}
    loop.run()
    assert ends == {"c": 1e-3, "a": 2e-3, "b": 2e-3}


def test_a_component_through_one_port_gets_the_water_filling_rates():
    """One port carries every flow (other ports shared or not, one bandwidth): the shortcut
    (bandwidth / k each) equals the water-filling; with two bandwidths it water-fills."""
    rng = random.Random(11)
    for _ in range(300):
        loop = EventLoop()
        t = SharedLinkTransfers(loop)
        k = rng.randint(2, 8)
        bws = [50e9] if rng.random() < 0.7 else [50e9, 25e9]
        hub_is_src = rng.random() < 0.5
        for i in range(k):
            other = f"X{rng.randrange(k)}"
            src, dst = ("H", other) if hub_is_src else (other, "H")
            t.start(f"r{i}", Link(src, dst, rng.choice(bws)), 1e6, lambda: None)
        loop.run(until_s=0.0)
        rates = t.active()
        t._water_fill()
        assert t.active() == rates
        if len(bws) == 1:
            assert set(rates.values()) == {50e9 / k}
