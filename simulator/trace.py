"""Per-step batch trace: one row per scheduled request per step, plus one row per step.

Columns are kept as plain Python lists while the simulation runs (appending
is the cheapest thing per step) and become Parquet tables at the end. The
request-level table is only filled when asked for (``keep_requests``): at
scale it is the largest output by far.

``role`` is the replica's cluster role: C (co-located), P (prefill) or D (decode).

``batch_trace`` (one row per scheduled request per step):
    role, replica_id, dp_rank (0 unless a lockstep DP group), step, start_s, end_s, request_id,
    num_scheduled_tokens, context_len, num_spec_tokens (speculative decoding: the drafts among
    num_scheduled_tokens it verifies; else 0),
    and the step's padded_tokens, cudagraph_mode and kv_blocks_used
``steps`` (one row per step):
    role, replica_id, dp_rank, step, start_s, end_s, num_reqs, num_tokens, padded_tokens,
    cudagraph_mode, kv_blocks_used, kv_blocks_total, num_waiting, num_preempted
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

REQUEST_COLUMNS = ("role", "replica_id", "dp_rank", "step", "start_s", "end_s", "request_id",
                   "num_scheduled_tokens", "context_len", "num_spec_tokens", "padded_tokens", "cudagraph_mode",
                   "kv_blocks_used")
STEP_COLUMNS = ("role", "replica_id", "dp_rank", "step", "start_s", "end_s", "num_reqs", "num_tokens",
                "padded_tokens", "cudagraph_mode", "kv_blocks_used", "kv_blocks_total",
                "num_waiting", "num_preempted")


class BatchTrace:
    """Column store of the steps every replica ran."""

    def __init__(self, keep_requests: bool) -> None:
        self.keep_requests = keep_requests
        self.req_cols: dict[str, list] = {c: [] for c in REQUEST_COLUMNS}
        self.step_cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}
        self._step_appends = tuple(self.step_cols[c].append for c in STEP_COLUMNS)   # once per step

    def add_step(self, replica_id: int, dp_rank: int, step: int, start_s: float, end_s: float,
                 request_ids: Sequence[str], num_tokens: Sequence[int], context_lens: Sequence[int],
                 padded_tokens: int, cudagraph_mode: str, kv_blocks_used: int,
                 kv_blocks_total: int, num_waiting: int, num_preempted: int, role: str = "C",
                 spec_tokens: Sequence[int] = ()) -> None:
        """Record one step; ``request_ids``/``num_tokens``/``context_lens`` (and ``spec_tokens``,
        speculative decoding's drafts: empty for none) are per scheduled request."""
        (a_role, a_replica, a_rank, a_step, a_start, a_end, a_reqs, a_tokens, a_padded, a_mode,
         a_used, a_total, a_waiting, a_preempted) = self._step_appends      # STEP_COLUMNS' order
        a_role(role)
        a_replica(replica_id)
        a_rank(dp_rank)
        a_step(step)
        a_start(start_s)
        a_end(end_s)
        a_reqs(len(request_ids))
        a_tokens(sum(num_tokens))
        a_padded(padded_tokens)
        a_mode(cudagraph_mode)
        a_used(kv_blocks_used)
        a_total(kv_blocks_total)
        a_waiting(num_waiting)
        a_preempted(num_preempted)
        if self.keep_requests:
            r = self.req_cols
            n = len(request_ids)
            r["role"].extend([role] * n)
            r["replica_id"].extend([replica_id] * n)
            r["dp_rank"].extend([dp_rank] * n)
            r["step"].extend([step] * n)
            r["start_s"].extend([start_s] * n)
            r["end_s"].extend([end_s] * n)
            r["request_id"].extend(request_ids)
            r["num_scheduled_tokens"].extend(num_tokens)
            r["context_len"].extend(context_lens)
            r["num_spec_tokens"].extend(spec_tokens or [0] * n)
            r["padded_tokens"].extend([padded_tokens] * n)
            r["cudagraph_mode"].extend([cudagraph_mode] * n)
            r["kv_blocks_used"].extend([kv_blocks_used] * n)

    def num_steps(self) -> int:
        return len(self.step_cols["step"])

    def requests_table(self) -> pa.Table:
        return pa.table(self.req_cols)

    def steps_table(self) -> pa.Table:
        return pa.table(self.step_cols)


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    """Write ``table`` atomically (temp file then rename) and return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(p)
    return p
