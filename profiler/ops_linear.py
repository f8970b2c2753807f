"""Linear family: the sharded GEMMs one TP rank runs per layer, plus the LM head.

    qkv      Y[m, (H/tp + 2*KV/tp) * d] = X[m, h]          (column parallel; KV heads replicated
    o_proj   Y[m, h] = X[m, (H/tp) * d]                     when tp > KV: max(1, KV // tp))
    gate_up  Y[m, 2 * I/tp] = X[m, h]                       (dense MLP / shared experts)
    down     Y[m, h] = X[m, I/tp]
    lm_head  Y[m, ceil(V_pad/tp)] = X[m, h]                 (V padded to a multiple of 64)

The all-reduce after o_proj/down and the LM-head gather are not run (collectives stubbed).
Backend "torch": ``torch.matmul(x, w.t(), out=y)`` (cuBLAS/cuBLASLt on CUDA, oneDNN/MKL on CPU).
Every --backend times GEMMs this way (vLLM's unquantized linear is F.linear): rows say "torch".
"""

from __future__ import annotations

from typing import Any

import torch

from frontier.model_spec import VOCAB_PADDING
from profiler.backends import runner_for
from profiler.context import RankContext, common_row
from profiler.grid import SweepGrid
from profiler.timing import time_both

FAMILY = "linear"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def gemm_shapes(ctx: RankContext) -> list[tuple[str, int, int]]:
    """(op_name, n, k) of the GEMMs one rank runs; deduplicated, in layer order."""
    m, tp = ctx.model, ctx.parallel.tp
    d = m.head_dim
    shapes = [("qkv_proj", (ctx.heads_per_rank + 2 * ctx.kv_heads_per_rank) * d, m.hidden_size),
              ("o_proj", m.hidden_size, ctx.heads_per_rank * d)]
    if m.intermediate_size and (not m.is_moe or m.num_dense_layers):
        inter = _ceil_div(m.intermediate_size, tp)
        shapes += [("gate_up_proj", 2 * inter, m.hidden_size), ("down_proj", m.hidden_size, inter)]
    if m.num_shared_experts:
        inter = _ceil_div(m.num_shared_experts * m.shared_expert_intermediate_size, tp)
        shapes += [("shared_gate_up_proj", 2 * inter, m.hidden_size), ("shared_down_proj", m.hidden_size, inter)]
    vocab = _ceil_div(m.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    shapes.append(("lm_head", _ceil_div(vocab, tp), m.hidden_size))
    return shapes


def build_points(ctx: RankContext, grid: SweepGrid) -> list[dict[str, Any]]:
    """One point per (GEMM, token count)."""
    return [{"op_name": name, "m": tokens, "n": n, "k": k}
            for name, n, k in gemm_shapes(ctx) for tokens in grid.linear_tokens]


def run_point(ctx: RankContext, point: dict[str, Any], backend: str = "torch") -> list[dict[str, Any]]:
    """Time Y = X W^T for one point; a kernel row and a launch row (backend "torch" whatever
    `backend` is: no backend has its own GEMM runner)."""
    if runner_for(FAMILY, backend) is not None:
        raise ValueError(f"linear runner for {backend!r} is listed but not wired here")
    backend = "torch"
    dev, dt = ctx.torch_device, ctx.torch_dtype
    gen = ctx.generator()
    x = ctx.randn(gen, point["m"], point["k"])
    w = ctx.randn(gen, point["n"], point["k"], scale=point["k"] ** -0.5)
    out = torch.empty(point["m"], point["n"], device=dev, dtype=dt)

    def fn() -> None:
        torch.matmul(x, w.t(), out=out)

    kernel = "aten::mm (cuBLAS)" if dev.type == "cuda" else "aten::mm (cpu)"
    rows = []
    for timing in time_both(fn, dev, ctx.timing, cold_l2=True):
        row = common_row(ctx, FAMILY, timing, backend, kernel)
        row.update(op_name=point["op_name"], m=point["m"], n=point["n"], k=point["k"], dtype=ctx.dtype)
        rows.append(row)
    return rows
