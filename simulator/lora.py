"""Multi-LoRA serving (vLLM ``--enable-lora``): the adapters' GPU slots, their kernels, the batch limit.

What vLLM 0.33 does (vllm/lora, vllm/v1/core/sched/scheduler.py), and what is simulated:

* Slots. With --enable-lora every linear layer of a decoder layer (qkv_proj, o_proj,
  gate_up_proj, down_proj), the token embedding and the lm_head get ``max_loras`` GPU slots of rank
  ``max_lora_rank`` in the model's dtype, allocated at load, so they come off the KV budget like
  weights (``slot_bytes_per_rank``). Per slot and rank (``create_lora_weights``): a column-parallel
  layer (qkv: 3 slices, gate_up: 2) keeps A whole (slices x rank x hidden) and B split by TP (its
  output shard x rank); a row-parallel one (o, down) A split (rank x its input shard) and B whole
  (hidden x rank); the embedding A (vocab x rank) and B (hidden x rank); the lm_head A (rank x
  hidden) and B (vocab x rank).
* Scheduling. At most ``max_loras`` adapters run at once: the adapters of all running requests
  count, and a waiting request of another adapter is skipped while they number max_loras
  (``SchedulerConfig.max_loras``; tests/oracle/test_lora_parity.py runs vLLM's scheduler beside
  ours). A request's adapter is part of its block hashes, so adapters never share cached blocks.
* Kernels. Each wrapped layer adds a shrink and an expand kernel (punica's triton ``lora_shrink``
  / ``lora_expand``, ``LoraOp``) in a step with an adapter in it: over the step's tokens for the
  decoder layers and the embedding (expand only), over the sampled rows for the lm_head (on the
  logits gathered over TP: the whole vocabulary on every rank). With CUDA
  graphs vLLM captures every size twice, with and without LoRA kernels
  (``cudagraph_specialize_lora``), so a step of base-model requests only runs none, and the
  CUDA-graph memory estimate counts twice the graphs (``kv_budget``). The kernels are priced by the
  roofline (no measured tables time them; a pricing note says so): each reads the A or B of every
  adapter in the step once.

Not simulated (refused with one line, ``lora_error``): mixture-of-experts, MLA and Gated DeltaNet
models, vocabularies over vLLM's 258,048 limit, --fully-sharded-loras, LoRA with speculative
decoding or outside co-located serving. Not priced: loading an adapter into a GPU slot or from
disk into the CPU cache (--max-cpu-loras), which vLLM does when a step needs an adapter its slots
do not hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from frontier.model_spec import pp_partition
from frontier.ops import LoraOp

if TYPE_CHECKING:
    from frontier.model_spec import ModelSpec
    from frontier.parallel import ParallelSpec

MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)    # vLLM 0.33 MaxLoRARanks
MAX_LORA_VOCAB = 258048      # LogitsProcessorWithLoRA: "When using LoRA, vocab size must be <= 258048"
LORA_BYTES = 2               # lora_dtype auto = the model dtype (bf16 / fp16; an fp8 checkpoint's too)


@dataclass(frozen=True)
class LoraConfig:
    """vLLM's LoRA flags: ``--max-loras`` (adapters in a batch), ``--max-lora-rank`` (one of
    MAX_LORA_RANKS), ``--max-cpu-loras`` (the CPU cache, >= max_loras; None = max_loras: accepted,
    not priced)."""

    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_loras", "max_lora_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"--{name.replace('_', '-')} must be an integer, got {value!r}")
        if self.max_loras < 1:
            raise ValueError(f"--max-loras must be >= 1, got {self.max_loras}")
        if self.max_lora_rank not in MAX_LORA_RANKS:
            raise ValueError(f"--max-lora-rank {self.max_lora_rank} is not one of "
                             f"{', '.join(map(str, MAX_LORA_RANKS))} (vLLM's ranks)")
        cpu = self.max_cpu_loras
        if cpu is not None and (not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < self.max_loras):
            raise ValueError(f"--max-cpu-loras ({cpu!r}) must be >= --max-loras ({self.max_loras})")


def lora_error(model: ModelSpec) -> str | None:
    """Why LoRA adapters on ``model`` are not simulated, or None (module docstring)."""
    kinds = [k for k, on in (("mixture-of-experts", model.is_moe), ("MLA", model.is_mla),
                             ("Gated DeltaNet", model.num_linear_attention_layers)) if on]
    if kinds:
        return f"--enable-lora on {model.name}'s {', '.join(kinds)} layers is not simulated; a dense model only"
    if model.vocab_size > MAX_LORA_VOCAB:
        return (f"--enable-lora with {model.name}'s vocabulary of {model.vocab_size} tokens: vLLM requires at most "
                f"{MAX_LORA_VOCAB}")
    return None


def _layer_modules(model: ModelSpec, tp: int) -> list[tuple[str, int, int, int, bool]]:
    """(name, slices, input width, output width summed over the slices, column-parallel) of a
    decoder layer's wrapped linear layers on one TP rank (their base layers' shards)."""
    h, d = model.hidden_size, model.head_dim
    heads, kv = model.num_attention_heads // tp, max(1, model.num_kv_heads // tp)
    inter = -(-model.intermediate_size // tp)
    return [("qkv_proj", 3, h, (heads + 2 * kv) * d, True), ("o_proj", 1, heads * d, h, False),
            ("gate_up_proj", 2, h, 2 * inter, True), ("down_proj", 1, inter, h, False)]


def slot_bytes_per_rank(model: ModelSpec, parallel: ParallelSpec, config: LoraConfig) -> int:
    """GPU bytes of the ``max_loras`` adapter slots on one rank of the worst pp stage (module
    docstring), at ``LORA_BYTES`` per element."""
    r, h, tp = config.max_lora_rank, model.hidden_size, parallel.tp
    per_layer = 0
    for _, slices, k, n, column in _layer_modules(model, tp):
        # column: A whole over the unsharded input (k = hidden), B the output shard; row: A the
        # input shard, B the whole output (n = hidden)
        per_layer += slices * r * k + n * r
    embedding = model.vocab_size * r + h * r
    lm_head = r * h + model.vocab_size * r
    stages = pp_partition(model.num_layers, parallel.pp)
    worst = max(n * per_layer + (embedding if i == 0 else 0) + (lm_head if i == len(stages) - 1 else 0)
                for i, n in enumerate(stages))
    return config.max_loras * worst * LORA_BYTES


def lora_ops(model: ModelSpec, tp: int, m: int, rows: int, num_loras: int, rank: int,
             act_bytes: float) -> list[tuple[LoraOp, int]]:
    """(op, multiplicity) of the LoRA kernels of a step of m tokens and ``rows`` sampled rows
    whose requests run ``num_loras`` adapters: shrink + expand per wrapped layer x the decoder
    layers, the embedding's expand, and the lm_head's shrink + expand over the rows."""
    out: list[tuple[LoraOp, int]] = []
    for name, slices, k, n, _ in _layer_modules(model, tp):
        out += [(LoraOp(f"{name}_lora_shrink", "shrink", m, k, n, rank, slices, num_loras, act_bytes=act_bytes),
                 model.num_layers),
                (LoraOp(f"{name}_lora_expand", "expand", m, k, n, rank, slices, num_loras, act_bytes=act_bytes),
                 model.num_layers)]
    h = model.hidden_size
    out.append((LoraOp("embedding_lora_expand", "expand", m, model.vocab_size, h, rank, 1, num_loras,
                       act_bytes=act_bytes), 1))
    vocab = model.vocab_size        # the delta is added to the logits gathered over TP: every rank, the whole vocab
    out += [(LoraOp("lm_head_lora_shrink", "shrink", rows, h, vocab, rank, 1, num_loras, act_bytes=act_bytes), 1),
            (LoraOp("lm_head_lora_expand", "expand", rows, h, vocab, rank, 1, num_loras, act_bytes=act_bytes), 1)]
    return out


LORA_PRICING_NOTE = ("LoRA: the adapters' punica kernels (shrink / expand per wrapped layer) are priced by the "
                     "roofline (no measured tables time them); loading adapters into GPU slots is not priced")
