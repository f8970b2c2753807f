"""MoE family: the routed-expert MLP of one MoE layer on one rank (gate_up, SiLU*mul, down).

Layout: ``ep`` ranks hold ``E / ep`` experts each; each expert's intermediate is split by
``moe_tp`` (I_local = ceil(I / moe_tp)). The measured rank is rank 0, holding experts
[0, E/ep). A point routes ``num_tokens`` tokens to ``topk`` of the E experts each:

    balanced: experts drawn uniformly                 skewed: expert e drawn with p ~ 1/(e+1)^1.2
                                                      (expert 0, on this rank, is the hottest)

and keeps the (token, expert) pairs that land on the local experts. Token dispatch / combine
(all-to-all) and the router GEMM are not run. Backend "torch": a per-expert loop of two
matmuls over the gathered tokens, ``index_add_`` back (kernel "per_expert_loop"); "vllm":
vLLM's fused_experts on the same routing (`topk_ids`, profiler/backend_vllm.py).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from profiler.backends import runner_for
from profiler.context import RankContext, common_row
from profiler.grid import SweepGrid
from profiler.timing import time_both

FAMILY = "moe"


def route(num_tokens: int, num_experts: int, topk: int, distribution: str, seed: int) -> np.ndarray:
    """[num_tokens, topk] expert ids, distinct per token, drawn deterministically."""
    rng = np.random.default_rng([seed, num_tokens, num_experts, topk, 0 if distribution == "balanced" else 1])
    p = np.ones(num_experts) if distribution == "balanced" else 1.0 / np.arange(1, num_experts + 1) ** 1.2
    p = p / p.sum()
    return np.stack([rng.choice(num_experts, size=topk, replace=False, p=p) for _ in range(num_tokens)])


def build_points(ctx: RankContext, grid: SweepGrid) -> list[dict[str, Any]]:
    """One point per (tokens, distribution); empty for a dense model."""
    m = ctx.model
    if not m.is_moe:
        return []
    local = m.num_experts // ctx.parallel.ep
    points = []
    for tokens in grid.moe_tokens:
        for dist in grid.moe_distributions:
            experts = route(tokens, m.num_experts, m.num_experts_per_tok, dist, grid.seed)
            counts = np.bincount(experts[experts < local], minlength=local)
            points.append({"num_tokens": tokens, "distribution": dist, "tokens_per_expert": [int(c) for c in counts]})
    return points


def run_point(ctx: RankContext, point: dict[str, Any], backend: str = "torch") -> list[dict[str, Any]]:
    """Time the local experts on their routed tokens; a kernel row and a launch row."""
    runner = runner_for(FAMILY, backend)
    if runner is None:
        fn, backend, kernel = _torch_experts(ctx, point), "torch", "per_expert_loop (aten::mm)"
    else:
        fn, kernel = runner(ctx, point)
    m, dev, counts = ctx.model, ctx.torch_device, point["tokens_per_expert"]
    arr = np.asarray(counts, dtype=float)
    spec = {"op_name": "moe_experts", "num_tokens": point["num_tokens"], "hidden_size": m.hidden_size,
            "inter_size": m.moe_intermediate_size, "topk": m.num_experts_per_tok, "num_experts": m.num_experts,
            "moe_tp_size": ctx.parallel.moe_tp, "moe_ep_size": ctx.parallel.ep, "moe_dtype": ctx.dtype,
            "distribution": point["distribution"], "max_tokens_per_expert": float(arr.max()),
            "var_tokens_per_expert": float(arr.var())}
    rows = []
    for timing in time_both(fn, dev, ctx.timing, cold_l2=True):
        row = common_row(ctx, FAMILY, timing, backend, kernel)
        row.update(spec)
        rows.append(row)
    return rows


def topk_ids(num_tokens: int, topk: int, num_experts: int, tokens_per_expert: list[int]) -> np.ndarray:
    """[num_tokens, topk] expert ids (global) whose local experts 0..L-1 receive exactly
    `tokens_per_expert` tokens, with distinct experts per token; the other slots go to
    non-local experts L..E-1. Built greedily: each local expert, busiest first, takes the tokens
    with the most free slots (lowest index first), so the loads are those of the point."""
    local = len(tokens_per_expert)
    free = np.full(num_tokens, topk)
    ids = np.full((num_tokens, topk), -1, dtype=np.int64)
    for e in sorted(range(local), key=lambda e: (-tokens_per_expert[e], e)):
        need = tokens_per_expert[e]
        order = np.lexsort((np.arange(num_tokens), -free))[:need]
        if need > num_tokens or (free[order] == 0).any():
            raise ValueError(f"tokens_per_expert {tokens_per_expert} cannot be routed as {num_tokens} tokens "
                             f"x top-{topk}")
        ids[order, topk - free[order]] = e
        free[order] -= 1
    remote = num_experts - local
    if free.max(initial=0) > remote:
        raise ValueError(f"tokens_per_expert {tokens_per_expert} leave {free.max()} slots for {remote} remote experts")
    for t in range(num_tokens):
        ids[t, topk - free[t]:] = local + np.arange(free[t])
    return ids


def _torch_experts(ctx: RankContext, point: dict[str, Any]) -> Callable[[], None]:
    """The per-expert loop over the point's routed tokens."""
    m, dev = ctx.model, ctx.torch_device
    h, inter = m.hidden_size, -(-m.moe_intermediate_size // ctx.parallel.moe_tp)
    counts = point["tokens_per_expert"]
    gen = ctx.generator()
    w13 = ctx.randn(gen, len(counts), 2 * inter, h, scale=h ** -0.5)
    w2 = ctx.randn(gen, len(counts), h, inter, scale=inter ** -0.5)
    x = ctx.randn(gen, point["num_tokens"], h)
    out = torch.zeros_like(x)
    idx_rng = np.random.default_rng(0)  # which tokens an expert gets does not change the cost
    index = [torch.tensor(np.sort(idx_rng.choice(point["num_tokens"], c, replace=False)), device=dev)
             for c in counts]

    def fn() -> None:
        out.zero_()
        for e, rows in enumerate(index):
            if rows.numel():
                g, u = torch.matmul(x[rows], w13[e].t()).chunk(2, dim=-1)
                out.index_add_(0, rows, torch.matmul(F.silu(g) * u, w2[e].t()))
    return fn
