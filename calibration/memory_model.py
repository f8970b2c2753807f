"""Non-KV memory terms fitted from profiled memory rows (family "memory"), carried by a bundle.

Rows (frontier/profile_schema.py, written by profiler/memory_run.py): one per (model, tp, pp,
ep, max_num_batched_tokens T) with weights_bytes, torch_peak_increase_bytes, non_torch_bytes
and cuda_graph_bytes, each null where it was not measured (a CPU run measures only weights).

Per (model, tp, pp, ep), each term only from the rows where it is not null:

    activation(T) = a0 + a1 * T      torch_peak_increase_bytes at T tokens
    non_torch     = median           non_torch_bytes
    graph_pool(n) = g0 + g1 * n      cuda_graph_bytes, n = min(T, GRAPH_TOKENS) captured tokens

A line is the least-squares fit over the rows when they hold at least two distinct token
counts, else the line through the origin and the mean (a0 = 0, a1 = mean / tokens). A term
with no measured row stays None, and `simulator.memory.kv_budget` uses its estimate.

The fits live in the bundle manifest under "memory" (plain JSON: reading them never unpickles
the payload): {"rows": N, "fits": [{"model", "tp", "pp", "ep", "max_num_batched_tokens": [...],
"activation": {"intercept_bytes", "bytes_per_token"} | null, "non_torch_bytes": int | null,
"graph_pool": {"intercept_bytes", "bytes_per_token"} | null}, ...]}.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from frontier.parallel import ParallelSpec
from simulator.memory import ProfiledOverheads

GRAPH_TOKENS = 512  # profiler/memory_run.py _GRAPH_TOKENS: one graph captured at min(T, 512) tokens
KEYS = ("model", "tp", "pp", "ep")


def _line(tokens: np.ndarray, values: np.ndarray) -> dict | None:
    """{"intercept_bytes", "bytes_per_token"} through the points; None when there are none."""
    if len(values) == 0:
        return None
    if len(np.unique(tokens)) < 2:
        return {"intercept_bytes": 0.0, "bytes_per_token": float(values.mean() / tokens[0])}
    slope, intercept = np.polyfit(tokens.astype(float), values.astype(float), 1)
    return {"intercept_bytes": float(intercept), "bytes_per_token": float(slope)}


def _measured(group: pd.DataFrame, column: str) -> pd.DataFrame:
    return group[group[column].notna()]


def fit_memory_rows(df: pd.DataFrame) -> dict:
    """The manifest "memory" entry fitted from memory rows (see the module docstring)."""
    missing = [c for c in (*KEYS, "max_num_batched_tokens", "torch_peak_increase_bytes", "non_torch_bytes",
                           "cuda_graph_bytes") if c not in df.columns]
    if missing:
        raise ValueError(f"memory rows lack columns {missing}")
    fits = []
    for key, group in df.groupby(list(KEYS), sort=True):
        act = _measured(group, "torch_peak_increase_bytes")
        graph = _measured(group, "cuda_graph_bytes")
        non_torch = _measured(group, "non_torch_bytes")["non_torch_bytes"]
        fits.append({
            **{k: (str(v) if k == "model" else int(v)) for k, v in zip(KEYS, key)},
            "max_num_batched_tokens": sorted(int(t) for t in group["max_num_batched_tokens"].unique()),
            "activation": _line(act["max_num_batched_tokens"].to_numpy(), act["torch_peak_increase_bytes"].to_numpy()),
            "non_torch_bytes": int(non_torch.median()) if len(non_torch) else None,
            "graph_pool": _line(np.minimum(graph["max_num_batched_tokens"].to_numpy(), GRAPH_TOKENS),
                                graph["cuda_graph_bytes"].to_numpy()),
        })
    return {"rows": int(len(df)), "fits": fits}


def memory_entry(profiles_root: str | Path, gpu: str) -> dict | None:
    """The "memory" entry for `gpu` from the rows under `profiles_root`; None when there are none."""
    from frontier.profile_schema import read_profiles

    df = read_profiles(profiles_root, "memory", gpu)
    return fit_memory_rows(df) if len(df) else None


def _bare(name: str) -> str:
    """A model name without its organisation, lower-cased: "meta-llama/Llama-3.1-8B" and a
    config folder named "Llama-3.1-8B" (what a profile of `--model path/Llama-3.1-8B` records)
    are the same model."""
    return name.lower().rsplit("/", 1)[-1]


def overheads_for(entry: dict | None, model: str, parallel: ParallelSpec) -> ProfiledOverheads | None:
    """The fitted terms of `model` (name as profiled, case-insensitive, organisation ignored) at
    this tp/pp/ep; None if the entry has no fit for it."""
    if not entry:
        return None
    want = (_bare(model), parallel.tp, parallel.pp, parallel.ep)
    for fit in entry.get("fits", []):
        if (_bare(str(fit["model"])), fit["tp"], fit["pp"], fit["ep"]) == want:
            act, graph = fit.get("activation") or {}, fit.get("graph_pool") or {}
            return ProfiledOverheads(
                activation_intercept_bytes=act.get("intercept_bytes"),
                activation_bytes_per_token=act.get("bytes_per_token"),
                non_torch_bytes=fit.get("non_torch_bytes"),
                graph_intercept_bytes=graph.get("intercept_bytes"),
                graph_bytes_per_token=graph.get("bytes_per_token"))
    return None
