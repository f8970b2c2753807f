"""Utilization and batch size per role, in the summary and over time, from the steps trace.

Every engine (one scheduler: a replica, or one DP rank of a lockstep group) appends one row
per step to ``BatchTrace.step_cols`` with its role (C, P, D, A), start, end, scheduled
requests and tokens. From those rows, per role with ``engines`` engines over the simulated
``[0, duration_s]``:

* busy fraction = (engine-seconds with a step in flight) / (engines x duration). Steps of one
  engine that overlap (pipeline stages with micro-batches in flight) count once: the union of
  the engine's step intervals. An engine that never ran a step counts as idle. For the
  attention role of AFD a step in flight includes its waits for the FFN side; the summary's
  ``attention_busy_fraction`` (``simulator.afd``, compute only) is the GPU-busy figure there.
* mean batch size = time-weighted mean of the requests scheduled in the steps in flight
  (request-seconds / step-seconds); likewise mean tokens per step. A step of a lockstep DP
  group is one row per rank, so these are per engine (DP rank), not per group.

``role_summary`` gives the summary keys ``{role}_busy_fraction`` (C, P, D),
``{role}_mean_batch_size``, ``{role}_mean_tokens_per_step`` and ``{role}_num_steps`` (all
roles); ``role_timeline`` the same per time bin (``--output-dir``'s ``roles.parquet``).
"""

from __future__ import annotations

import math

import numpy as np

ROLE_NAMES = {"C": "colocated", "P": "prefill", "D": "decode", "A": "attention"}
MAX_BINS = 500
BIN_WIDTHS_S = tuple(m * 10.0 ** k for k in range(-3, 6) for m in (1.0, 2.0, 5.0))


def bin_width_s(duration_s: float) -> float:
    """The smallest of 1, 2, 5 x 10^k seconds (1 ms .. 500,000 s) giving at most MAX_BINS bins."""
    for width in BIN_WIDTHS_S:
        if duration_s / width <= MAX_BINS:
            return width
    return BIN_WIDTHS_S[-1]


def _role_rows(step_cols: dict[str, list], role: str) -> dict[str, np.ndarray]:
    roles = np.asarray(step_cols["role"], dtype=object)
    keep = roles == role
    out = {c: np.asarray(step_cols[c])[keep] for c in ("replica_id", "dp_rank", "start_s", "end_s",
                                                       "num_reqs", "num_tokens")}
    return out


def _busy_intervals(rows: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of each engine's steps with overlaps inside an engine removed (union)."""
    engine = rows["replica_id"].astype(np.int64) * 1_000_003 + rows["dp_rank"].astype(np.int64)
    order = np.lexsort((rows["start_s"], engine))
    eng, s, e = engine[order], rows["start_s"][order].astype(float), rows["end_s"][order].astype(float)
    if len(s) == 0:
        return s, e
    # latest end of the same engine's earlier steps; a step is busy only past it
    prev_end = np.empty_like(e)
    first = np.ones(len(eng), dtype=bool)
    first[1:] = eng[1:] != eng[:-1]
    running = e.copy()
    group_start = np.flatnonzero(first)
    for a, b in zip(group_start, list(group_start[1:]) + [len(e)]):
        running[a:b] = np.maximum.accumulate(e[a:b])
    prev_end[first] = -np.inf
    prev_end[~first] = running[np.flatnonzero(~first) - 1]
    start = np.maximum(s, prev_end)
    return start, np.maximum(e, start)


def _integral_at(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray, t: np.ndarray) -> np.ndarray:
    """At every time in ``t``: sum over intervals of weight x (time of [start, end) before t)."""
    if len(starts) == 0:
        return np.zeros(len(t))
    times = np.concatenate([starts, ends])
    delta = np.concatenate([weights, -weights]).astype(float)
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(delta[order])
    # integral up to each event time: sum of level x (gap to the next event)
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])
    idx = np.searchsorted(times, t, side="right") - 1
    out = np.zeros(len(t))
    inside = idx >= 0
    i = idx[inside]
    out[inside] = area[i] + level[i] * (t[inside] - times[i])
    return out


def _role_integrals(rows: dict[str, np.ndarray], t: np.ndarray) -> dict[str, np.ndarray]:
    busy_s, busy_e = _busy_intervals(rows)
    s, e = rows["start_s"].astype(float), rows["end_s"].astype(float)
    return {"busy": _integral_at(busy_s, busy_e, np.ones(len(busy_s)), t),
            "step": _integral_at(s, e, np.ones(len(s)), t),
            "reqs": _integral_at(s, e, rows["num_reqs"].astype(float), t),
            "tokens": _integral_at(s, e, rows["num_tokens"].astype(float), t)}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def role_summary(step_cols: dict[str, list], engines: dict[str, int], duration_s: float) -> dict[str, float | int]:
    """Summary keys per role of ``engines`` (role letter -> engine count); see the module doc."""
    out: dict[str, float | int] = {}
    end = np.array([max(duration_s, 0.0)])
    for role, n in engines.items():
        name = ROLE_NAMES[role]
        rows = _role_rows(step_cols, role)
        tot = {k: float(v[0]) for k, v in _role_integrals(rows, end).items()}
        if role != "A":
            out[f"{name}_busy_fraction"] = min(1.0, _ratio(tot["busy"], n * duration_s))   # (float sums)
        out[f"{name}_mean_batch_size"] = _ratio(tot["reqs"], tot["step"])
        out[f"{name}_mean_tokens_per_step"] = _ratio(tot["tokens"], tot["step"])
        out[f"{name}_num_steps"] = len(rows["start_s"])
    return out


def role_timeline(step_cols: dict[str, list], engines: dict[str, int], duration_s: float) -> dict[str, list]:
    """One row per role and time bin: role, bin_start_s, bin_end_s, engines, busy_fraction,
    mean_batch_size, mean_tokens_per_step (``bin_width_s(duration_s)`` wide bins)."""
    cols: dict[str, list] = {k: [] for k in ("role", "bin_start_s", "bin_end_s", "engines", "busy_fraction",
                                             "mean_batch_size", "mean_tokens_per_step")}
    if duration_s <= 0:
        return cols
    width = bin_width_s(duration_s)
    nbins = max(1, math.ceil(duration_s / width - 1e-9))
    edges = np.minimum(np.arange(nbins + 1) * width, duration_s)
    for role, n in engines.items():
        per_bin = {k: np.diff(v) for k, v in _role_integrals(_role_rows(step_cols, role), edges).items()}
        span = np.diff(edges)
        for i in range(nbins):
            cols["role"].append(role)
            cols["bin_start_s"].append(float(edges[i]))
            cols["bin_end_s"].append(float(edges[i + 1]))
            cols["engines"].append(n)
            cols["busy_fraction"].append(min(1.0, _ratio(float(per_bin["busy"][i]), n * float(span[i]))))
            cols["mean_batch_size"].append(_ratio(float(per_bin["reqs"][i]), float(per_bin["step"][i])))
            cols["mean_tokens_per_step"].append(_ratio(float(per_bin["tokens"][i]), float(per_bin["step"][i])))
    return cols
