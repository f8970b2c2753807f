"""KV-cache block budget at start-up, as vLLM 0.33 computes it (engine-semantics §2.2).

    requested   = ceil(total_memory * gpu_memory_utilization)     (vllm/v1/worker/utils.py request_memory)
    non_kv      = weights + non_torch + activation_peak           (memory_profiling around profile_run)
    available   = requested - non_kv - cuda_graph_estimate        (gpu_worker.determine_available_memory)
    num_blocks  = available // bytes_per_block                    (kv_cache_planning; override wins)
    logged      "GPU KV cache size: N tokens" with N = int(num_blocks / cdiv(max_model_len, block) * max_model_len)
                (kv_cache_utils.get_kv_cache_capacity) -> num_blocks * block when block divides max_model_len

Weights come from `ModelSpec.weight_bytes_per_rank` (worst pp stage). The other three
terms are *estimates from the model* until profiled memory rows replace them:

- non_torch: NCCL / cuBLAS workspaces and the custom all-reduce buffers allocated after the
  start snapshot. vLLM logs "non_torch_memory takes ~0.1 GiB" at TP1 and ~0.5-1.5 GiB with
  TP>1 (NCCL communicators + custom all-reduce IPC buffers): NON_TORCH_TP1_BYTES /
  NON_TORCH_MULTI_GPU_BYTES.
- activation peak of profile_run (one dummy forward over max_num_batched_tokens tokens T,
  then a dummy sampler over min(max_num_seqs, T) rows):
    forward  = T*h*3 (hidden, residual, normed input) + max(qkv out, MLP gate_up + act out,
               fused-MoE caches T*topk*(3*I_moe/ffn_tp + h)) in activation bytes;
    sampler  = T*h (last hidden) + rows*vocab*(2 bf16 logits + 4*SAMPLER_FP32_COPIES) — the
               logits are gathered to full vocab on rank 0 before sampling;
    peak     = max(forward, sampler).
- cuda graphs (0 when eager): 0.33 (model runner V2, vllm/v1/worker/gpu/cudagraph_utils.py
  profile_cudagraph_memory) captures all PIECEWISE graphs into a throwaway pool and extrapolates
  FULL graphs as first + (n-1)*max(second, 1 MiB). We take: one shared pool = forward activation
  at the largest capture size, plus CUDA_GRAPH_BYTES_PER_LAYER per captured layer for every
  further graph (PIECEWISE and FULL counted alike).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.cuda_graph import CudaGraphConfig

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from frontier.model_spec import ModelSpec
    from frontier.parallel import ParallelSpec

GIB = 1 << 30
MIB = 1 << 20
NON_TORCH_TP1_BYTES = int(0.15 * GIB)       # cuBLAS workspace + allocator slack, single GPU
NON_TORCH_MULTI_GPU_BYTES = int(1.0 * GIB)  # + NCCL communicators and custom all-reduce buffers
SAMPLER_FP32_COPIES = 3                     # fp32 logits, probs, and a sorted/sampled copy
CUDA_GRAPH_BYTES_PER_LAYER = 64 * 1024      # graph node/exec state per captured layer per size (~2 MiB / 32 layers)
MIN_GRAPH_BYTES = MIB                       # vLLM floors the per-graph estimate at 1 MiB


@dataclass(frozen=True)
class MemoryBudget:
    """Per-rank memory at start-up, in bytes; KV capacity in blocks and tokens."""

    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_bytes: int
    num_gpu_blocks: int
    block_size: int
    kv_cache_tokens: int
    bytes_per_block: int
    requested_bytes: int = 0

    def max_concurrency(self, max_model_len: int) -> float:
        """vLLM "Maximum concurrency for L tokens per request": blocks / cdiv(L, block_size)."""
        if max_model_len <= 0:
            raise ValueError(f"max_model_len must be > 0, got {max_model_len}")
        return self.num_gpu_blocks / -(-max_model_len // self.block_size)

    def logged_kv_cache_tokens(self, max_model_len: int) -> int:
        """The N of vLLM's "GPU KV cache size: N tokens" (depends on max_model_len)."""
        return int(self.max_concurrency(max_model_len) * max_model_len)


def activation_peak_bytes(model: ModelSpec, parallel: ParallelSpec, num_tokens: int,
                          num_sample_rows: int) -> int:
    """Transient peak of profile_run over `num_tokens` tokens and a sampler over `num_sample_rows`."""
    ab, h, tp = model.quant.activation_bytes, model.hidden_size, parallel.tp
    heads = model.num_attention_heads // tp
    kv = max(1, model.num_kv_heads // tp)
    if model.is_mla:
        qkv = heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim) * 3
    else:
        qkv = (heads + 2 * kv) * model.head_dim
    widest = qkv
    if model.intermediate_size and model.num_moe_layers < model.num_layers:
        widest = max(widest, 3 * -(-model.intermediate_size // tp))            # gate_up (2I) + act (I)
    if model.is_moe:
        inter = -(-model.moe_intermediate_size // parallel.moe_tp)
        widest = max(widest, model.num_experts_per_tok * (3 * inter + h))
    forward = num_tokens * (3 * h + widest) * ab
    sampler = num_tokens * h * ab + num_sample_rows * model.vocab_size * (ab + 4 * SAMPLER_FP32_COPIES)
    return int(max(forward, sampler))


def cuda_graph_bytes(model: ModelSpec, parallel: ParallelSpec, cudagraph: CudaGraphConfig) -> int:
    """Stated model of vLLM 0.33's profile_cudagraph_memory (0 when eager)."""
    if cudagraph.enforce_eager or not cudagraph.capture_sizes:
        return 0
    layers = max(1, -(-model.num_layers // parallel.pp))
    first = activation_peak_bytes(model, parallel, cudagraph.max_capture_size, 0)
    per_graph = max(CUDA_GRAPH_BYTES_PER_LAYER * layers, MIN_GRAPH_BYTES)
    n_piecewise, n_full = len(cudagraph.capture_sizes), len(cudagraph.full_sizes)
    return first + per_graph * (max(n_piecewise - 1, 0) + max(n_full - 1, 0))


def kv_budget(model: ModelSpec, parallel: ParallelSpec, gpu: GpuSpec, *,
              gpu_memory_utilization: float = 0.92, block_size: int = 16,
              max_num_batched_tokens: int, max_num_seqs: int, enforce_eager: bool = False,
              num_gpu_blocks_override: int | None = None, max_model_len: int | None = None,
              num_spec_tokens: int = 0) -> MemoryBudget:
    """KV budget of one rank (all ranks use the minimum; ours are symmetric).

    `kv_cache_tokens` = num_gpu_blocks * block_size, or vLLM's logged figure when
    `max_model_len` is given. Raises ValueError when the model does not fit.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]")
    if block_size <= 0 or max_num_batched_tokens <= 0 or max_num_seqs <= 0:
        raise ValueError(f"block_size={block_size}, max_num_batched_tokens={max_num_batched_tokens}, "
                         f"max_num_seqs={max_num_seqs} must all be > 0")
    if num_gpu_blocks_override is not None and num_gpu_blocks_override <= 0:
        raise ValueError(f"num_gpu_blocks_override={num_gpu_blocks_override} must be > 0")
    requested = math.ceil(gpu.memory_bytes * gpu_memory_utilization)
    weights = model.weight_bytes_per_rank(parallel)
    gib = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
    if weights >= requested:
        raise ValueError(
            f"{model.name} does not fit: weights {gib(weights)} per GPU >= requested {gib(requested)} "
            f"({gpu.name} {gib(gpu.memory_bytes)} x gpu_memory_utilization {gpu_memory_utilization}) "
            f"at tp={parallel.tp} pp={parallel.pp}; raise tp/pp or gpu_memory_utilization")
    non_torch = NON_TORCH_TP1_BYTES if parallel.tp * parallel.dp * parallel.pp == 1 else NON_TORCH_MULTI_GPU_BYTES
    activation = activation_peak_bytes(model, parallel, max_num_batched_tokens,
                                       min(max_num_seqs, max_num_batched_tokens))
    graphs = cuda_graph_bytes(model, parallel, CudaGraphConfig.from_vllm(
        max_num_seqs, max_num_batched_tokens, enforce_eager, gpu.sm_version, num_spec_tokens))
    available = requested - weights - non_torch - activation - graphs
    bytes_per_block = model.kv_bytes_per_token_per_rank(parallel) * block_size
    if num_gpu_blocks_override is not None:
        blocks = num_gpu_blocks_override
    else:
        if available < bytes_per_block:
            raise ValueError(
                f"no memory left for KV cache on {gpu.name}: requested {gib(requested)} - weights {gib(weights)} "
                f"- activations {gib(activation)} - non-torch {gib(non_torch)} - cuda graphs {gib(graphs)} "
                f"= {gib(available)}; raise tp/pp or gpu_memory_utilization, or lower max_num_batched_tokens")
        blocks = available // bytes_per_block
    kv_bytes = available if num_gpu_blocks_override is None else blocks * bytes_per_block
    tokens = blocks * block_size
    if max_model_len is not None:   # vLLM: int(blocks / cdiv(L, block) * L)
        tokens = int(blocks / -(-max_model_len // block_size) * max_model_len)
    return MemoryBudget(weights, activation, non_torch, graphs, kv_bytes, blocks, block_size,
                        tokens, bytes_per_block, requested)
