"""``--perfetto PATH``: the run as a Chrome trace-event JSON (opens in ui.perfetto.dev).

Tracks::

    process "C replicas" / "P replicas" / "D replicas" / ... (pid per role, ROLE_PIDS)
        thread "replica R" (or "replica R dp K" for lockstep DP ranks): tid = 1000 * R + K
            one complete ("X") slice per step: name "step N", args num_reqs, num_tokens,
            padded_tokens, cudagraph_mode, kv_blocks_used, kv_blocks_total, num_waiting,
            num_preempted
        counter tracks "busy fraction" and "mean batch size" (``write_perfetto`` given the
            run's ``simulator.role_stats.role_timeline``): the role's bins
    process "KV transfers" (P/D only, pid TRANSFER_PID)
        one async slice ("b"/"e", id = request index) per request whose KV moved P -> D,
        named by the request id, args prefill_replica, decode_replica

Times are microseconds on the simulation clock (``ts``/``dur``), rounded to 1 ns. Built
from the batch trace's step columns and the request records, so it costs nothing while
the simulation runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROLE_PIDS = {"C": 1, "P": 2, "D": 3, "A": 4, "F": 5}
ROLE_NAMES = {"C": "co-located", "P": "prefill", "D": "decode", "A": "attention", "F": "FFN"}
TRANSFER_PID = 100
_STEP_ARGS = ("num_reqs", "num_tokens", "padded_tokens", "cudagraph_mode", "kv_blocks_used",
              "kv_blocks_total", "num_waiting", "num_preempted")


def _us(t_s: float) -> float:
    return round(t_s * 1e6, 3)


def trace_events(step_cols: dict[str, list], records: list | None = None) -> list[dict[str, Any]]:
    """The trace events of a run: metadata first, then step slices, then KV transfers."""
    cols = step_cols
    n = len(cols["step"])
    meta: list[dict[str, Any]] = []
    seen_pid: set[int] = set()
    seen_tid: set[tuple[int, int]] = set()
    slices: list[dict[str, Any]] = []
    lockstep = {(r, rep) for r, rep, d in zip(cols["role"], cols["replica_id"], cols["dp_rank"]) if d > 0}
    for i in range(n):
        role, rep, dp = cols["role"][i], cols["replica_id"][i], cols["dp_rank"][i]
        pid, tid = ROLE_PIDS.get(role, 99), 1000 * rep + dp
        if pid not in seen_pid:
            seen_pid.add(pid)
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                         "args": {"name": f"{role} {ROLE_NAMES.get(role, role)} replicas"}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                         "args": {"sort_index": pid}})
        if (pid, tid) not in seen_tid:
            seen_tid.add((pid, tid))
            name = f"replica {rep} dp {dp}" if (role, rep) in lockstep else f"replica {rep}"
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                         "args": {"sort_index": tid}})
        start, end = cols["start_s"][i], cols["end_s"][i]
        slices.append({"name": f"step {cols['step'][i]}", "cat": "step", "ph": "X", "pid": pid, "tid": tid,
                       "ts": _us(start), "dur": _us(end - start),
                       "args": {k: cols[k][i] for k in _STEP_ARGS}})
    transfers: list[dict[str, Any]] = []
    for index, r in enumerate(records or ()):
        if r.decode_replica < 0:
            continue
        if not transfers:
            meta.append({"name": "process_name", "ph": "M", "pid": TRANSFER_PID, "tid": 0,
                         "args": {"name": "KV transfers P -> D"}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": TRANSFER_PID, "tid": 0,
                         "args": {"sort_index": TRANSFER_PID}})
        common = {"name": r.request_id, "cat": "kv_transfer", "pid": TRANSFER_PID, "tid": 0, "id": index}
        transfers.append({**common, "ph": "b", "ts": _us(r.kv_transfer_start_s),
                          "args": {"prefill_replica": r.prefill_replica, "decode_replica": r.decode_replica}})
        transfers.append({**common, "ph": "e", "ts": _us(r.kv_transfer_start_s + r.kv_transfer_s)})
    return meta + slices + transfers


def counter_events(timeline: dict[str, list]) -> list[dict[str, Any]]:
    """Counter ("C") events per role and time bin of a ``role_timeline``: the busy fraction and
    the mean batch size from each bin's start (the last bin's values end at its end)."""
    events: list[dict[str, Any]] = []
    rows = list(zip(timeline["role"], timeline["bin_start_s"], timeline["bin_end_s"], timeline["busy_fraction"],
                    timeline["mean_batch_size"]))
    for i, (role, start, end, busy, batch) in enumerate(rows):
        pid = ROLE_PIDS.get(role, 99)
        for name, value in (("busy fraction", busy), ("mean batch size", batch)):
            events.append({"name": name, "ph": "C", "pid": pid, "ts": _us(start), "args": {name: value}})
            if i + 1 == len(rows) or rows[i + 1][0] != role:
                events.append({"name": name, "ph": "C", "pid": pid, "ts": _us(end), "args": {name: value}})
    return events


def write_perfetto(result, path: str | Path, timeline: dict[str, list] | None = None) -> Path:
    """Write ``result``'s trace (``SimulationResult``) atomically to ``path``; return the path.
    ``timeline``: the run's ``role_timeline``, drawn as counter tracks (None: none)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    events = trace_events(result.trace.step_cols, result.records)
    if timeline is not None:
        events += counter_events(timeline)
    doc = {"traceEvents": events, "displayTimeUnit": "ms"}
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    os.replace(tmp, p)
    return p
