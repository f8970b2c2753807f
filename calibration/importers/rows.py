"""Shared pieces of the importers: the import report, filling common columns, writing.

Importers build a frame of family columns plus the provenance they know, then
:func:`finish` fills every other schema column with null, and :func:`write_rows` writes
one part per (family, gpu), refusing to import the same source twice into one partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from frontier import profile_schema as ps

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class ImportReport:
    """What an importer wrote: rows per family, rows per (gpu, family), and what it skipped (with why)."""

    rows: dict[str, int] = field(default_factory=dict)
    rows_by_gpu: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()


def finish(df: pd.DataFrame, family: str, **constants) -> pd.DataFrame:
    """``df`` with ``constants`` set, ``family``/``schema_version`` filled, other columns null, in schema order."""
    df = df.copy()
    for name, value in constants.items():
        df[name] = value
    df["family"] = family
    df["schema_version"] = ps.SCHEMA_VERSION
    for col in ps.columns_for(family):
        if col not in df.columns:
            df[col] = None
    return df[ps.columns_for(family)]


def write_rows(frames: list[pd.DataFrame], out_root: Path, family: str, gpu: str) -> int:
    """Concatenate and write one part for (family, gpu); returns the row count (0 writes nothing)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return 0
    df = pd.concat(frames, ignore_index=True)
    _refuse_duplicate_source(Path(out_root), family, gpu, set(df["source"].unique()))
    ps.write_profile(df, out_root, family, gpu)
    return len(df)


def _refuse_duplicate_source(root: Path, family: str, gpu: str, sources: set[str]) -> None:
    for part in sorted((root / f"family={family}" / f"gpu={gpu}").glob("part-*.parquet")):
        found = set(pq.read_table(part, columns=["source"]).column(0).to_pylist()) & sources
        if found:
            raise ValueError(f"{part.parent} already holds {sorted(found)} rows; import into a fresh --out folder")


def add(report_rows: dict[str, int], by_gpu: dict[str, dict[str, int]], gpu: str, family: str, n: int) -> None:
    """Accumulate ``n`` rows of (gpu, family) into the report dictionaries."""
    if n:
        report_rows[family] = report_rows.get(family, 0) + n
        by_gpu.setdefault(gpu, {})[family] = by_gpu.get(gpu, {}).get(family, 0) + n
