"""Memory runs: instantiate one rank's shard with dummy weights, run one forward pass at
``max_num_batched_tokens`` and record what the KV-cache budget formula needs.

The shard (pp = 1): vocab-parallel embedding and LM head (V padded to 64, split by tp), per
layer two RMSNorm weights, QKV and O projections (heads / tp, KV heads max(1, KV // tp)), then a
dense MLP (I / tp) or, for MoE layers, a bf16 router [E, h] and E/ep local experts of
I / moe_tp (+ shared experts / tp). The forward pass is one prefill of ``T`` tokens (causal
SDPA on 4-D inputs: flash or memory-efficient on CUDA, as vLLM's flash attention; no KV cache,
vLLM profiles before the cache exists) and logits for the last token; all-reduces are skipped.

Columns (bytes):
  weights_bytes              CUDA: memory_allocated increase while building; CPU: sum of parameter bytes.
  torch_peak_increase_bytes  CUDA: max_memory_allocated during the forward minus allocated before. CPU: null.
  non_torch_bytes            CUDA: increase of device memory in use (mem_get_info) not explained by the
                             increase of torch's reserved memory, over the whole run, in a freshly
                             spawned process (as vLLM's profile run). One card: no NCCL communicators or
                             custom all-reduce buffers (the simulator adds its estimate of those at
                             TP/PP/DP > 1). CPU: null.
  cuda_graph_bytes           CUDA: drop of free device memory (mem_get_info, as vLLM measures it) while
                             warming up and capturing one CUDA graph of the forward at min(T, 512) tokens
                             (decode graphs of vLLM are smaller), or the growth of torch's reserved memory
                             (the graph's private pool) where that is larger. CPU: null.
"""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.nn.functional as F

from frontier.model_spec import VOCAB_PADDING
from profiler.context import RankContext, common_row
from profiler.grid import SweepGrid

FAMILY = "memory"
_GRAPH_TOKENS = 512


def build_points(ctx: RankContext, grid: SweepGrid) -> list[dict[str, Any]]:
    return [{"max_num_batched_tokens": t} for t in grid.memory_max_num_batched_tokens]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def build_shard(ctx: RankContext) -> dict[str, torch.Tensor]:
    """Dummy (uninitialised) weights of one rank, by name."""
    m, p = ctx.model, ctx.parallel
    h, d, dev, dt = m.hidden_size, m.head_dim, ctx.torch_device, ctx.torch_dtype
    w: dict[str, torch.Tensor] = {}

    def new(name: str, *shape: int) -> None:
        w[name] = torch.empty(*shape, device=dev, dtype=dt).normal_(0, 0.02)

    vocab = _cdiv(_cdiv(m.vocab_size, VOCAB_PADDING) * VOCAB_PADDING, p.tp)
    new("embed", vocab, h)
    if not m.tie_word_embeddings:
        new("lm_head", vocab, h)
    new("final_norm", h)
    qkv = (ctx.heads_per_rank + 2 * ctx.kv_heads_per_rank) * d
    for i in range(m.num_layers):
        new(f"{i}.norm1", h), new(f"{i}.norm2", h), new(f"{i}.qkv", qkv, h), new(f"{i}.o", h, ctx.heads_per_rank * d)
        if m.is_moe_layer(i):
            inter, local = _cdiv(m.moe_intermediate_size, p.moe_tp), m.num_experts // p.ep
            new(f"{i}.router", m.num_experts, h), new(f"{i}.w13", local, 2 * inter, h), new(f"{i}.w2", local, h, inter)
            if m.num_shared_experts:
                si = _cdiv(m.num_shared_experts * m.shared_expert_intermediate_size, p.tp)
                new(f"{i}.gate_up", 2 * si, h), new(f"{i}.down", h, si)
        else:
            inter = _cdiv(m.intermediate_size, p.tp)
            new(f"{i}.gate_up", 2 * inter, h), new(f"{i}.down", h, inter)
    return w


def _mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    g, u = F.linear(x, gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(g) * u, down)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal self-attention of one prefill: q [T, Hq, d], k and v [T, Hk, d] -> [T, Hq, d].

    SDPA gets 4-D [1, heads, T, d] inputs: its flash and memory-efficient kernels take only 4-D
    tensors, and a 3-D call falls back to the math kernel, which materialises the T x T scores
    (Llama-3.1-8B TP1 at 8,192 tokens: a 20.6 GB "activation peak" on an H200, where vLLM's
    flash-attention profile run peaks near 1 GB). On CUDA the math kernel is excluded outright;
    GQA stays native (flash) except in fp32, which flash lacks: there K/V are repeated per
    query head for the memory-efficient kernel.
    """
    gqa = q.shape[1] != k.shape[1]
    q4, k4, v4 = (t.transpose(0, 1)[None] for t in (q, k, v))
    if not q.is_cuda:
        out = F.scaled_dot_product_attention(q4, k4, v4, is_causal=True, enable_gqa=gqa)
    else:  # pragma: no cover - needs a GPU
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if gqa and q.dtype == torch.float32:
            k4, v4 = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k4, v4))
            gqa = False
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            out = F.scaled_dot_product_attention(q4, k4, v4, is_causal=True, enable_gqa=gqa)
    return out[0].transpose(0, 1)


def forward(ctx: RankContext, w: dict[str, torch.Tensor], tokens: int) -> torch.Tensor:
    """One prefill of `tokens` tokens through the shard; logits of the last token."""
    m, d = ctx.model, ctx.model.head_dim
    hq, hk = ctx.heads_per_rank, ctx.kv_heads_per_rank
    ids = torch.arange(tokens, device=ctx.torch_device) % w["embed"].shape[0]
    x = F.embedding(ids, w["embed"])
    for i in range(m.num_layers):
        q, k, v = F.linear(F.rms_norm(x, (x.shape[-1],), w[f"{i}.norm1"]), w[f"{i}.qkv"]).split(
            [hq * d, hk * d, hk * d], dim=-1)
        a = causal_attention(q.view(tokens, hq, d), k.view(tokens, hk, d), v.view(tokens, hk, d))
        x = x + F.linear(a.reshape(tokens, hq * d), w[f"{i}.o"])
        y = F.rms_norm(x, (x.shape[-1],), w[f"{i}.norm2"])
        out = _mlp(y, w[f"{i}.gate_up"], w[f"{i}.down"]) if f"{i}.gate_up" in w else torch.zeros_like(y)
        if f"{i}.router" in w:
            top = torch.topk(F.linear(y, w[f"{i}.router"]), m.num_experts_per_tok, dim=-1).indices
            for e in range(w[f"{i}.w13"].shape[0]):
                rows = (top == e).any(-1).nonzero().flatten()
                out = out.index_add(0, rows, _mlp(y[rows], w[f"{i}.w13"][e], w[f"{i}.w2"][e]))
        x = x + out
    x = F.rms_norm(x[-1:], (x.shape[-1],), w["final_norm"])
    return F.linear(x, w.get("lm_head", w["embed"]))


def run_point(ctx: RankContext, point: dict[str, Any], backend: str = "torch") -> list[dict[str, Any]]:
    """One memory row for (shard, max_num_batched_tokens)."""
    tokens = point["max_num_batched_tokens"]
    measured = _measure_cuda_fresh(ctx, tokens) if ctx.device.startswith("cuda") else _measure_cpu(ctx, tokens)
    p = ctx.parallel
    row = common_row(ctx, FAMILY, None, "torch", "dummy-weight forward (torch)")  # any --backend: torch
    row.update(model=ctx.model.name, tp=p.tp, pp=p.pp, ep=p.ep, max_num_batched_tokens=tokens, **measured)
    return [row]


def _measure_cpu(ctx: RankContext, tokens: int) -> dict[str, Any]:
    w = build_shard(ctx)
    with torch.no_grad():
        forward(ctx, w, tokens)
    return {"weights_bytes": sum(t.nbytes for t in w.values()), "torch_peak_increase_bytes": None,
            "non_torch_bytes": None, "cuda_graph_bytes": None}


def _measure_cuda_fresh(ctx: RankContext, tokens: int) -> dict[str, Any]:  # pragma: no cover - needs a GPU
    """`_measure_cuda` in a freshly spawned process, as vLLM's profile run is the first forward of
    its worker: the kernel modules, cuBLAS handles and the like that a first forward loads count
    as non-torch memory there (Llama-3.1-8B TP1 on an H200: 166 MB in a fresh process, 0 once an
    earlier sweep point had loaded them), so a row must not depend on what ran before it."""
    import multiprocessing

    torch.cuda.empty_cache()  # hand this process's cached blocks back before the child allocates
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_measure_cuda, (ctx, tokens))


def _measure_cuda(ctx: RankContext, tokens: int) -> dict[str, Any]:  # pragma: no cover - needs a GPU
    dev = ctx.torch_device
    torch.cuda.empty_cache()
    torch.cuda.synchronize(dev)

    def used() -> int:
        free, total = torch.cuda.mem_get_info(dev)
        return total - free

    used0, reserved0, alloc0 = used(), torch.cuda.memory_reserved(dev), torch.cuda.memory_allocated(dev)
    w = build_shard(ctx)
    torch.cuda.synchronize(dev)
    weights = torch.cuda.memory_allocated(dev) - alloc0
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    with torch.no_grad():
        forward(ctx, w, tokens)
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - base
    non_torch = (used() - used0) - (torch.cuda.memory_reserved(dev) - reserved0)
    graph_bytes = _graph_bytes(ctx, w, min(tokens, _GRAPH_TOKENS), used)
    del w
    torch.cuda.empty_cache()
    return {"weights_bytes": int(weights), "torch_peak_increase_bytes": int(peak),
            "non_torch_bytes": int(max(0, non_torch)), "cuda_graph_bytes": graph_bytes}


def _graph_bytes(ctx: RankContext, w: dict[str, torch.Tensor], tokens: int,
                 used: Any) -> int | None:  # pragma: no cover - needs a GPU
    """Free-memory drop while capturing one graph; None when the forward cannot be captured:
    always for MoE models (the expert loop's data-dependent ``nonzero`` syncs the host, and a
    capture aborted by it can leave the stream unusable), or when capture raises."""
    dev = ctx.torch_device
    if ctx.model.is_moe:
        return None
    # torch.cuda.graph() empties the allocator's cache when it starts capturing: empty it first,
    # or the blocks cached by the forward at T tokens hide the graph pool (the first H200 run
    # measured 0 bytes for every dense shard this way).
    gc.collect()
    torch.cuda.empty_cache()
    before, reserved_before = used(), torch.cuda.memory_reserved(dev)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad():
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                forward(ctx, w, tokens)
            torch.cuda.current_stream(dev).wait_stream(side)
            with torch.cuda.graph(graph):
                forward(ctx, w, tokens)
        torch.cuda.synchronize(dev)
    except RuntimeError:
        torch.cuda.synchronize(dev)
        return None
    grown = max(used() - before, torch.cuda.memory_reserved(dev) - reserved_before)
    del graph
    return int(max(0, grown))
