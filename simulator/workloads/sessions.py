"""Multi-round reasoning sessions: the stateful requests of agentic workloads (the paper's §3.3).

A session is a chain of rounds: each round is an ordinary request (a prefill, then a decode); the
rounds before the last are hidden planning ("thinking") whose output feeds a tool call, and the
tool's latency passes before the next round arrives with the tool's observation as new tokens.
Round k's prompt is the session's whole sequence so far (every earlier round's prompt and output)
plus its new tokens, so it hits the blocks the earlier rounds left in the prefix cache when they
are still cached (``RequestSpec.session_id``: the rounds share one content), and it goes to the
engine that served the session so far (session affinity, ``simulator.cluster``). The last round
produces the user-facing answer.

``sample_reasoning_sessions`` draws a synthetic workload: the number of rounds is long-tailed
(geometric with the given mean, at most ``max_rounds``), the lengths uniform in [L (1 - r),
L (1 + r)] as the random dataset draws them, seeded; ``load_session_trace`` reads recorded
sessions (their rounds' new tokens, outputs and tool latencies) from a file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.request import RequestSpec
from simulator.workloads.random_dataset import length_bounds
from simulator.workloads.trace import arrival_s, as_int, read_rows


@dataclass(frozen=True)
class Round:
    """One round of a session: ``new_tokens`` appended to the session's sequence (the first
    round's whole prompt, later a tool's observation), ``output_len`` generated, and
    ``tool_latency_s`` before the next round arrives (0 for the last)."""

    new_tokens: int
    output_len: int
    tool_latency_s: float = 0.0


@dataclass(frozen=True)
class Session:
    """A multi-round session arriving at ``arrival_s``."""

    session_id: str
    arrival_s: float
    rounds: tuple[Round, ...]

    def round_spec(self, k: int, arrival_s: float, context_len: int) -> RequestSpec:
        """Round k's request, arriving at ``arrival_s``: the session's ``context_len`` tokens so
        far (every earlier round's prompt and output) plus the round's new tokens."""
        r = self.rounds[k]
        return RequestSpec(f"{self.session_id}.{k}", arrival_s, context_len + r.new_tokens, r.output_len,
                           session_id=self.session_id)


def sample_reasoning_sessions(num_sessions: int, mean_rounds: float, max_rounds: int, first_input_len: int,
                              round_input_len: int, round_output_len: int, answer_len: int, tool_latency_s: float,
                              range_ratio: float, seed: int, arrivals_s: list[float]) -> list[Session]:
    """``num_sessions`` synthetic sessions, session i arriving at ``arrivals_s[i]``: rounds ~
    geometric(1 / mean_rounds) capped at max_rounds; the first round's prompt ~ first_input_len,
    later rounds' new tokens ~ round_input_len, intermediate outputs ~ round_output_len, the final
    answer ~ answer_len (each uniform in [L (1 - r), L (1 + r)], at least 1), a fixed tool latency."""
    rng = np.random.default_rng(seed)
    rounds = np.minimum(rng.geometric(1.0 / mean_rounds, size=num_sessions), max_rounds)

    def lengths(mean: int, n: int) -> list[int]:
        lo, hi = length_bounds(mean, range_ratio, at_least_one=True)
        return [int(x) for x in rng.integers(lo, hi + 1, size=n)]

    sessions = []
    for i, n in enumerate(rounds.tolist()):
        inputs = lengths(first_input_len, 1) + lengths(round_input_len, n - 1)
        outputs = lengths(round_output_len, n - 1) + lengths(answer_len, 1)
        sessions.append(Session(str(i), arrivals_s[i], tuple(
            Round(a, b, tool_latency_s if k < n - 1 else 0.0) for k, (a, b) in enumerate(zip(inputs, outputs)))))
    return sessions


def load_session_trace(path: str, num_sessions: int) -> list[Session]:
    """The first ``num_sessions`` sessions of a session trace (JSONL, a JSON array, or Parquet: one
    row per session), sorted by arrival (stable). Columns: ``arrival_time_s`` (float >= 0),
    ``rounds`` (a non-empty list of objects with ``input_len``: the round's new tokens, >= 1,
    ``output_len`` >= 1 and an optional ``tool_latency_s`` >= 0 before the next round, default 0),
    an optional ``session_id`` (default: the row index; unique)."""
    p = Path(path)
    if p.suffix.lower() == ".csv" and p.is_file():
        raise ValueError(f"session trace {path!r}: a CSV row cannot hold a session's rounds; use .jsonl, .json or .parquet")
    rows = read_rows(path, "session trace")
    sessions: list[Session] = []
    seen: set[str] = set()
    for n, raw in enumerate(rows[:num_sessions]):
        if not isinstance(raw, dict) or raw.get("arrival_time_s") is None or not raw.get("rounds"):
            raise ValueError(f"session trace row {n}: need arrival_time_s and a non-empty list of rounds")
        arrival = arrival_s(raw["arrival_time_s"], f"session trace row {n}")
        if not isinstance(raw["rounds"], list):
            raise ValueError(f"session trace row {n}: rounds={raw['rounds']!r} is not a list of rounds")
        rounds = []
        for k, r in enumerate(raw["rounds"]):
            if not isinstance(r, dict):
                raise ValueError(f"session trace row {n}, round {k}: {r!r} is not an object with input_len and output_len")
            tool = r.get("tool_latency_s") or 0.0
            if not isinstance(tool, (int, float)) or isinstance(tool, bool) or not 0 <= tool < math.inf:
                raise ValueError(f"session trace row {n}, round {k}: tool_latency_s={tool!r} is invalid; need a "
                                 "finite number >= 0")
            rounds.append(Round(as_int(r.get("input_len"), "input_len", n, 1),
                                as_int(r.get("output_len"), "output_len", n, 1), float(tool)))
        sid = str(raw["session_id"]) if raw.get("session_id") is not None else str(n)
        if sid in seen:
            raise ValueError(f"session trace row {n}: session_id={sid!r} repeats an earlier row's")
        seen.add(sid)
        sessions.append(Session(sid, arrival, tuple(rounds)))
    return sorted(sessions, key=lambda s: s.arrival_s)
