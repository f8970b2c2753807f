"""Measured MoE dispatch / combine kernels: DeepEP's tables, as vLLM 0.24.0 runs them.

AIConfigurator times DeepEP's dispatch and combine inside vLLM 0.24.0 on one node
(``comm/vllm/0.24.0/moe_a2a_perf``; imported as comm rows ``moe_dispatch`` / ``moe_combine``,
``calibration.importers.aiconfigurator``): EP 8 on H100 / H200 / B200 / B300, EP 4 on GB200 /
GB300; high-throughput kernels (``deepep_ht``, 20 SMs) at 16-65,536 tokens per rank and
low-latency ones (``deepep_ll``) at 1-256; hidden 3,072-7,168, top-k 6 or 8, 256 or 384
experts (DeepSeek-V3, Qwen3-235B, GLM, Kimi-like shapes). vLLM's --all2all-backend
``deepep_high_throughput`` reads the first, ``deepep_low_latency`` the second
(``VLLM_TABLE``); other kernels (DeepEP v2, MoRI, NIXL-EP, FlashInfer) have no table.

A query (tokens per rank, hidden size, top-k, EP size) is priced from the curves of its
(kernel, phase, EP size), each curve one measured shape's latency against tokens:

* tokens: linear interpolation in (log tokens, log seconds) between measured counts; below
  the smallest count the smallest count's latency (the tables are flat there: DeepEP HT
  dispatch ~250 us, LL ~50-60 us on H200); above the largest, that latency scaled by the
  token ratio (the top of every table grows linearly), counted as ``above-table``.
* shape: a shape the table holds (hidden, top-k; its expert-count variants' median) is its
  own curve; another shape gets log seconds fitted linearly in log hidden over the measured
  shapes at that token count (least squares), counted as ``shape-fit``. Top-k is left out of
  the fit: each shape priced from the four others (``bench/moe_a2a_tables.py``'s method, H100 /
  H200 / B200 / GB200, both kernels and phases) misses by 7.9 % median, 13.9 % mean with log
  hidden, 9.5 % / 17.8 % with log(hidden x top-k), 10.0 / 19.5 % taking the nearest shape.

No table for the kernel, phase or EP size, or an EP group across nodes: the analytical
all_to_all of the routed bytes, counted as a fallback (``CalibratedCommBackend.fallbacks``).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from frontier.ops import MoeA2a

# --all2all-backend name -> AIC's comm_backend of its measured table
VLLM_TABLE = {"deepep_high_throughput": "deepep_ht", "deepep_low_latency": "deepep_ll"}
Curve = tuple[np.ndarray, np.ndarray]          # (log tokens ascending, log seconds)


class MoeA2aTables:
    """Measured dispatch / combine curves per (AIC backend, phase, EP size), per (hidden, top-k)."""

    def __init__(self, curves: dict[tuple[str, str, int], dict[tuple[int, int], Curve]]) -> None:
        self.curves = curves

    def time_s(self, moe: MoeA2a, group_size: int, counts: Counter) -> float | None:
        """Seconds of one dispatch or combine on a one-node EP group of ``group_size`` ranks, or
        None without a table (the caller prices it analytically). ``counts`` gets the reasons a
        price left the measured points (``above-table``, ``shape-fit``)."""
        shapes = self.curves.get((VLLM_TABLE.get(moe.kernel, ""), moe.phase, group_size))
        if not shapes:
            return None
        x = math.log(moe.tokens)
        tag = f"moe_{moe.phase}/n={group_size}"
        if any(x > xs[-1] for xs, _ in shapes.values()):
            counts[f"{tag}/above-table"] += 1
        own = shapes.get((moe.hidden_size, moe.topk))
        if own is not None:
            return math.exp(_at(own, x))
        counts[f"{tag}/shape-fit"] += 1
        keys = sorted(shapes)
        b = np.log([h for h, _ in keys])
        y = np.array([_at(shapes[key], x) for key in keys])
        if np.ptp(b) == 0.0:
            return math.exp(float(y.mean()))
        slope, icpt = np.polyfit(b, y, 1)
        return math.exp(float(icpt + slope * math.log(moe.hidden_size)))


def _at(curve: Curve, x: float) -> float:
    """log seconds of a curve at log tokens ``x`` (module doc: flat below, linear above)."""
    xs, ys = curve
    if x > xs[-1]:
        return float(ys[-1] + x - xs[-1])
    return float(np.interp(x, xs, ys))


def tables_from_rows(df) -> MoeA2aTables:
    """The measured curves of comm profile rows ``moe_dispatch`` / ``moe_combine`` (kernel timing;
    repeats of one point and the expert-count variants of one shape reduced to their median)."""
    rows = df[df["op_name"].isin(["moe_dispatch", "moe_combine"]) & (df["timing_mode"] == "kernel")]
    curves: dict[tuple[str, str, int], dict[tuple[int, int], Curve]] = {}
    keys = ["backend", "op_name", "num_gpus", "hidden_size", "topk"]
    for (backend, op, n, h, k), g in rows.groupby(keys):
        g = g.groupby("num_tokens", as_index=False)["latency_s_median"].median()
        g = g[(g["num_tokens"] > 0) & (g["latency_s_median"] > 0)].sort_values("num_tokens")
        if len(g):
            phase = str(op).removeprefix("moe_")
            curves.setdefault((str(backend), phase, int(n)), {})[(int(h), int(k))] = (
                np.log(g["num_tokens"].to_numpy(float)), np.log(g["latency_s_median"].to_numpy(float)))
    return MoeA2aTables(curves)
