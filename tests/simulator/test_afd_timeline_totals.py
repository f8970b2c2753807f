"""afd_timeline(per_item=False) (the run-grouped totals path) equals the per-item loop exactly."""

import random

import pytest

from simulator.afd import afd_timeline, split_lanes, timeline_totals


def _rows(rng: random.Random, lanes: int) -> list[float]:
    return [rng.choice([0.0, rng.uniform(1e-6, 5e-5), 1e-5]) for _ in range(lanes)]


def _layers(rng: random.Random, n_layers: int, lanes: int) -> list[list[float]]:
    """Runs of one shared row object (as the step pricer builds them) mixed with fresh rows."""
    out: list[list[float]] = []
    while len(out) < n_layers:
        row = _rows(rng, lanes)
        out += [row] * rng.randint(1, 40)
    return out[:n_layers]


def test_totals_path_equals_per_item_loop_on_random_inputs():
    rng = random.Random(7)
    for _ in range(300):
        lanes, n_layers = rng.randint(1, 4), rng.randint(1, 100)
        a, s, f, r = (_layers(rng, n_layers, lanes) for _ in range(4))
        head, tail = rng.uniform(0, 2e-5), rng.uniform(0, 2e-5)
        full = afd_timeline(a, s, f, r, head, tail)
        fast = afd_timeline(a, s, f, r, head, tail, per_item=False)
        assert (fast.end_s, fast.a_busy_s, fast.f_busy_s, fast.xfer_s) == \
            (full.end_s, full.a_busy_s, full.f_busy_s, full.xfer_s)
        assert fast.a_end == fast.f_end == fast.r_end == ()


def test_totals_path_equal_but_distinct_rows():
    """Rows that are equal but not the same object run as separate runs: same result."""
    a = [[3e-5, 2.5e-5] for _ in range(94)]
    s = [[1e-5, 1.1e-5]] * 94
    f = [[4e-5, 3.9e-5]] * 50 + [[2e-5, 1e-5]] * 44
    full = afd_timeline(a, s, f, s, 1e-5, 2e-5)
    fast = afd_timeline(a, s, f, s, 1e-5, 2e-5, per_item=False)
    assert fast.end_s == full.end_s
    assert (fast.a_busy_s, fast.f_busy_s, fast.xfer_s) == (full.a_busy_s, full.f_busy_s, full.xfer_s)


def test_totals_path_rejects_ragged_lanes():
    row, short = [1.0, 1.0], [1.0]
    with pytest.raises(ValueError, match="same \\(non-zero\\) number of lanes"):
        afd_timeline([row, row], [row, short], [row, row], [row, row], per_item=False)
    with pytest.raises(ValueError, match="same \\(non-zero\\) number of lanes"):
        afd_timeline([[]], [[]], [[]], [[]], per_item=False)


def test_timeline_totals_from_runs_equals_the_expanded_layers():
    rng = random.Random(11)
    for _ in range(100):
        lanes = rng.randint(1, 3)
        runs = [(rng.randint(1, 60), *(_rows(rng, lanes) for _ in range(4))) for _ in range(rng.randint(1, 3))]
        a, s, f, r = ([row for run in runs for row in [run[i]] * run[0]] for i in range(1, 5))
        full = afd_timeline(a, s, f, r, 1e-5, 3e-6)
        fast = timeline_totals(runs, 1e-5, 3e-6)
        assert (fast.end_s, fast.a_busy_s, fast.f_busy_s, fast.xfer_s) == \
            (full.end_s, full.a_busy_s, full.f_busy_s, full.xfer_s)


def _split_lanes_loop(new_tokens, lanes):
    """split_lanes written as the plain scan over the requests."""
    n = len(new_tokens)
    k = max(1, min(lanes, n))
    total = sum(new_tokens)
    bounds, start, acc = [], 0, 0
    for i, t in enumerate(new_tokens):
        acc += t
        left_lanes = k - len(bounds) - 1
        if left_lanes and acc * k >= total * (len(bounds) + 1) and n - (i + 1) >= left_lanes:
            bounds.append((start, i + 1))
            start = i + 1
    bounds.append((start, n))
    return bounds


def test_split_lanes_equals_the_plain_scan():
    rng = random.Random(5)
    for _ in range(3000):
        n = rng.randint(1, 40)
        big = rng.random() < 0.3
        tokens = tuple(rng.choice([1, 1, 1, rng.randint(1, 2000)]) if big else 1 for _ in range(n))
        lanes = rng.randint(1, 6)
        assert split_lanes(tokens, lanes) == _split_lanes_loop(tokens, lanes), (tokens, lanes)
