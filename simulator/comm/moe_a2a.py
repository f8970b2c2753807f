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

Across nodes (EP 16, 32, 64 on nodes of 8 GPUs): AIC times DeepEP across nodes only inside
SGLang 0.5.0 (``comm/sglang/0.5.6.post2/wideep_deepep_{ll,normal}_perf``, H100 / H200, hidden
7,168, top-k 8; imported as rows of framework "sglang"). Those absolute times are not vLLM's
(its 1-node LL kernels take 12-16 us at a few tokens there, vLLM's 40-60 us), so they only scale:
the vLLM 1-node price of the query times SGLang's (n nodes / 1 node) ratio at the same token
count and phase (interpolated as above, flat outside its counts), counted as ``node-scaled``.
On H200 (median over the token counts), 2 / 4 / 8 nodes cost LL dispatch 1.74 / 2.27 / 2.58x one
node, HT dispatch (20 SMs) 1.72 / 3.28 / 5.90x (``bench/moe_a2a_tables.py``). AIC's H100 folder holds
the same SGLang rows as its H200 one (labelled with either GPU), so both GPUs scale alike.

No table for the kernel, phase or EP size: the analytical all_to_all of the routed bytes,
counted as a fallback (``CalibratedCommBackend.fallbacks``).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from frontier.ops import MOE_A2A_OPS, MoeA2a
from simulator.comm.group import CommGroup

# --all2all-backend name -> AIC's comm_backend of its measured table
VLLM_TABLE = {"deepep_high_throughput": "deepep_ht", "deepep_low_latency": "deepep_ll"}
Curve = tuple[np.ndarray, np.ndarray]          # (log tokens ascending, log seconds)


class MoeA2aTables:
    """Measured dispatch / combine curves per (AIC backend, phase, EP size), per (hidden, top-k);
    ``node_scaling``: per (AIC backend, phase), one curve per EP size across 1-8 nodes (module doc)."""

    def __init__(self, curves: dict[tuple[str, str, int], dict[tuple[int, int], Curve]],
                 node_scaling: dict[tuple[str, str], dict[int, Curve]] | None = None) -> None:
        self.curves = curves
        self.node_scaling = node_scaling or {}

    def time_s(self, moe: MoeA2a, group: CommGroup, counts: Counter) -> float | None:
        """Seconds of one dispatch or combine over the EP ``group``, or None without a table (the
        caller prices it analytically). ``counts`` gets the reasons a price left the measured
        points (``above-table``, ``shape-fit``, ``node-scaled``)."""
        if group.in_one_node:
            return self._one_node_s(moe, group.size, counts)
        backend = VLLM_TABLE.get(moe.kernel, "")
        scaling = self.node_scaling.get((backend, moe.phase), {})
        node = group.ranks_per_node
        if group.size not in scaling or node not in scaling or (backend, moe.phase, node) not in self.curves:
            return None
        one_node = self._one_node_s(moe, node, counts)
        counts[f"moe_{moe.phase}/n={group.size}/node-scaled"] += 1
        x = math.log(moe.tokens)
        return one_node * math.exp(np.interp(x, *scaling[group.size]) - np.interp(x, *scaling[node]))

    def _one_node_s(self, moe: MoeA2a, group_size: int, counts: Counter) -> float | None:
        shapes = self.curves.get((VLLM_TABLE.get(moe.kernel, ""), moe.phase, group_size))
        if not shapes:
            return None
        x = math.log(moe.tokens)
        tag = f"moe_{moe.phase}/n={group_size}"
        own = shapes.get((moe.hidden_size, moe.topk))
        if any(x > xs[-1] for xs, _ in ([own] if own is not None else shapes.values())):
            counts[f"{tag}/above-table"] += 1
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
    repeats of one point and the expert-count variants of one shape reduced to their median):
    vLLM's rows price, SGLang's scale across nodes (the release with the most EP sizes, its shapes
    pooled)."""
    rows = df[df["op_name"].isin(MOE_A2A_OPS) & (df["timing_mode"] == "kernel")]
    framework = rows["framework"].astype(str).str.lower()
    curves: dict[tuple[str, str, int], dict[tuple[int, int], Curve]] = {}
    for (backend, op, n, h, k), g in rows[framework == "vllm"].groupby(["backend", "op_name", "num_gpus",
                                                                          "hidden_size", "topk"]):
        curve = _curve(g)
        if curve is not None:
            curves.setdefault((str(backend), str(op).removeprefix("moe_"), int(n)), {})[(int(h), int(k))] = curve
    node_scaling: dict[tuple[str, str], dict[int, Curve]] = {}
    for (backend, op), g in rows[framework == "sglang"].groupby(["backend", "op_name"]):
        version = max(g.groupby("framework_version")["num_gpus"].nunique().items(), key=lambda kv: kv[1])[0]
        g = g[g["framework_version"] == version]
        per_size = {int(n): c for n, part in g.groupby("num_gpus") if (c := _curve(part)) is not None}
        if len(per_size) > 1:
            node_scaling[(str(backend), str(op).removeprefix("moe_"))] = per_size
    return MoeA2aTables(curves, node_scaling)


def _curve(g) -> Curve | None:
    """(log tokens, log seconds) of rows, the median of each token count; None without valid rows."""
    g = g.groupby("num_tokens", as_index=False)["latency_s_median"].median()
    g = g[(g["num_tokens"] > 0) & (g["latency_s_median"] > 0)].sort_values("num_tokens")
    if not len(g):
        return None
    return np.log(g["num_tokens"].to_numpy(float)), np.log(g["latency_s_median"].to_numpy(float))
