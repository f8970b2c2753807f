"""Sweeps: a grid of operator points over parallel layouts, run in resumable chunks.

    plan():  for each layout (RankContext), for each family, the module's points, cut into
             chunks of `grid.chunk_size`. A point's key = sha256 of (family, backend, layout,
             point) JSON; a chunk's key = sha256 of its points' keys. Both are deterministic.
    run():   for each chunk not yet on disk: time every point (kernel + launch rows), then write
             the chunk's rows as ONE part file through `frontier.profile_schema.write_profile`
             (atomic rename), with ``source_table = "sweep-chunk:<key>"``.

Resume = list the chunk keys found in ``source_table`` of the part files already under the
output root and skip those chunks. A chunk is on disk entirely or not at all, so a killed sweep
rerun with the same arguments loses and duplicates no row. Progress goes to stderr as one
updating line with an ETA (seconds per point measured so far x points left).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import pandas as pd
import pyarrow.parquet as pq

from frontier.profile_schema import FAMILIES as SCHEMA_FAMILIES
from frontier.profile_schema import write_profile
from profiler import memory_run, ops_attention, ops_elementwise, ops_linear, ops_moe
from profiler.context import RankContext
from profiler.grid import SweepGrid

MODULES = {"linear": ops_linear, "attention": ops_attention, "moe": ops_moe,
           "elementwise": ops_elementwise, "memory": memory_run}
PROFILER_FAMILIES = tuple(MODULES)
CHUNK_TAG = "sweep-chunk:"
_MEMORY_ESTIMATE_S = 2.0
_PROGRESS_EVERY_S = 0.5


def writable_families() -> tuple[str, ...]:
    """Families the profiler measures AND the profile schema can store."""
    return tuple(f for f in PROFILER_FAMILIES if f in SCHEMA_FAMILIES)


def check_families(families: list[str]) -> None:
    for f in families:
        if f not in PROFILER_FAMILIES:
            raise ValueError(f"unknown family {f!r}; valid: {', '.join(PROFILER_FAMILIES)}")
        if f not in SCHEMA_FAMILIES:
            raise ValueError(f"family {f!r} has no table in the profile schema (frontier/profile_schema.py "
                             f"FAMILIES); writable: {', '.join(writable_families())}")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Chunk:
    """Points of one family on one layout, written together as one part file."""

    family: str
    ctx: RankContext
    points: tuple[str, ...]  # canonical JSON of each point
    key: str


def plan(contexts: list[RankContext], families: list[str], grid: SweepGrid, backend: str = "torch") -> list[Chunk]:
    """All chunks of the sweep, in run order."""
    chunks = []
    for ctx in contexts:
        for family in families:
            points = [json.dumps(p, sort_keys=True) for p in MODULES[family].build_points(ctx, grid)]
            for i in range(0, len(points), grid.chunk_size):
                part = tuple(points[i:i + grid.chunk_size])
                ident = json.dumps({"family": family, "backend": backend, "layout": ctx.layout_key()}, sort_keys=True)
                key = _sha("\n".join(_sha(ident + p) for p in part))
                chunks.append(Chunk(family, ctx, part, key))
    return chunks


def completed_chunks(out: Path, gpu: str) -> set[str]:
    """Chunk keys already written under `out` for `gpu`."""
    done: set[str] = set()
    for part in Path(out).glob(f"family=*/gpu={gpu}/part-*.parquet"):
        tables = pq.read_table(part, columns=["source_table"]).column(0).to_pylist()
        done.update(t[len(CHUNK_TAG):] for t in set(tables) if t and t.startswith(CHUNK_TAG))
    return done


def estimate_s(chunks: list[Chunk]) -> float:
    """Rough wall time: two timed modes per point at the context's budget, memory runs apart."""
    total = 0.0
    for c in chunks:
        per_point = _MEMORY_ESTIMATE_S if c.family == "memory" else 2 * c.ctx.timing.estimate_s() + 0.01
        total += per_point * len(c.points)
    return total


@dataclass
class SweepResult:
    written: list[Path] = field(default_factory=list)
    skipped_chunks: int = 0
    rows: int = 0


def run(chunks: list[Chunk], out: Path, backend: str = "torch", stream: TextIO | None = None,
        on_chunk_done: Callable[[int], None] | None = None, max_chunks: int | None = None) -> SweepResult:
    """Run the chunks not yet under `out`; `max_chunks` stops after that many new chunks.

    `on_chunk_done(n)` is called after the n-th new chunk is written (tests inject failures here).
    """
    stream = stream if stream is not None else sys.stderr
    result = SweepResult()
    gpus = {c.ctx.gpu for c in chunks}
    done = set().union(*(completed_chunks(out, g) for g in gpus)) if gpus else set()
    todo = [c for c in chunks if c.key not in done]
    result.skipped_chunks = len(chunks) - len(todo)
    if max_chunks is not None:
        todo = todo[:max_chunks]
    total_points, points_done, start = sum(len(c.points) for c in todo), 0, time.perf_counter()
    shown = -1.0
    for n, chunk in enumerate(todo, 1):
        rows: list[dict[str, Any]] = []
        for point in chunk.points:
            rows.extend(MODULES[chunk.family].run_point(chunk.ctx, json.loads(point), backend))
            points_done += 1
            elapsed = time.perf_counter() - start
            if elapsed - shown >= _PROGRESS_EVERY_S or points_done == total_points:
                _progress(stream, n, len(todo), chunk, points_done, total_points, elapsed)
                shown = elapsed
        for row in rows:
            row["source_table"] = CHUNK_TAG + chunk.key
        result.written.append(write_profile(pd.DataFrame(rows), out, chunk.family, chunk.ctx.gpu))
        result.rows += len(rows)
        if on_chunk_done is not None:
            on_chunk_done(n)
    if todo:
        stream.write("\n")
    return result


def _progress(stream: TextIO, n: int, chunks: int, chunk: Chunk, done: int, total: int, elapsed_s: float) -> None:
    eta = elapsed_s / done * (total - done)
    p = chunk.ctx.parallel
    stream.write(f"\rprofile: chunk {n}/{chunks} ({chunk.family} tp={p.tp} ep={p.ep}) points {done}/{total} "
                 f"elapsed {elapsed_s:6.1f}s ETA {eta:6.1f}s")
    stream.flush()
