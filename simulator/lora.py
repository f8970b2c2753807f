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

* Loading. Before a step the worker makes the step's adapters resident (``AdapterCache``, vLLM's
  ``LRUCacheWorkerLoRAManager._apply_adapters``): an adapter missing from the CPU cache
  (``--max-cpu-loras`` adapters, LRU; default max_loras) is read from disk, one missing from the
  GPU slots (``--max-loras``, LRU) is copied into the least recently used slot; dropping an adapter
  from the CPU cache frees its GPU slot too. A copy costs the slot's bytes over the GPU's host link
  (``GpuSpec.host_bw_bytes_per_s``) at ``HOST_COPY_EFF``, before the step's forward (``load_s``; an
  adapter's true rank is not known, so a slot's full rank is copied). Disk reads are counted
  (``lora_disk_loads`` in the summary) but not priced: the disk's speed is not known.

Not simulated (refused with one line, ``lora_error``): mixture-of-experts, MLA and Gated DeltaNet
models, vocabularies over vLLM's 258,048 limit, --fully-sharded-loras, LoRA with speculative
decoding, pipeline parallelism or outside co-located serving.
"""

from __future__ import annotations

from collections import OrderedDict
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
# Share of the host link's bandwidth a pinned host-to-device copy reaches (nvbandwidth's
# host_to_device_memcpy_ce: ~50-55 GB/s of PCIe 5.0 x16's 64)
HOST_COPY_EFF = 0.8


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


def _layer_modules(model: ModelSpec, tp: int) -> list[tuple[str, int, int, int]]:
    """(name, slices, input width, output width summed over the slices) of a decoder layer's
    wrapped linear layers on one TP rank (their base layers' shards: a column-parallel layer,
    qkv or gate_up, has the whole input and its output shard, a row-parallel one the reverse)."""
    h, d = model.hidden_size, model.head_dim
    heads, kv = model.num_attention_heads // tp, max(1, model.num_kv_heads // tp)
    inter = -(-model.intermediate_size // tp)
    return [("qkv_proj", 3, h, (heads + 2 * kv) * d), ("o_proj", 1, heads * d, h),
            ("gate_up_proj", 2, h, 2 * inter), ("down_proj", 1, inter, h)]


def slot_bytes_per_rank(model: ModelSpec, parallel: ParallelSpec, config: LoraConfig) -> int:
    """GPU bytes of the ``max_loras`` adapter slots on one rank of the worst pp stage (module
    docstring), at ``LORA_BYTES`` per element."""
    r, h, tp = config.max_lora_rank, model.hidden_size, parallel.tp
    per_layer = 0
    for _, slices, k, n in _layer_modules(model, tp):
        # column: A whole over the unsharded input (k = hidden), B the output shard; row: A the
        # input shard, B the whole output (n = hidden)
        per_layer += slices * r * k + n * r
    embedding = model.vocab_size * r + h * r
    lm_head = r * h + model.vocab_size * r
    stages = pp_partition(model.num_layers, parallel.pp)
    worst = max(n * per_layer + (embedding if i == 0 else 0) + (lm_head if i == len(stages) - 1 else 0)
                for i, n in enumerate(stages))
    return config.max_loras * worst * LORA_BYTES


def lora_layer_ops(model: ModelSpec, tp: int, m: int, num_loras: int, rank: int,
                   act_bytes: float) -> list[tuple[LoraOp, int]]:
    """(op, multiplicity) of the LoRA kernels over a step's m tokens whose requests run
    ``num_loras`` adapters: shrink + expand per wrapped layer x the decoder layers, and the
    embedding's expand (``lora_head_ops``: the lm_head's)."""
    out: list[tuple[LoraOp, int]] = []
    for name, slices, k, n in _layer_modules(model, tp):
        out += [(LoraOp(f"{name}_lora_shrink", "shrink", m, k, n, rank, slices, num_loras, act_bytes=act_bytes),
                 model.num_layers),
                (LoraOp(f"{name}_lora_expand", "expand", m, k, n, rank, slices, num_loras, act_bytes=act_bytes),
                 model.num_layers)]
    out.append((LoraOp("embedding_lora_expand", "expand", m, model.vocab_size, model.hidden_size, rank, 1,
                       num_loras, act_bytes=act_bytes), 1))
    return out


def lora_head_ops(model: ModelSpec, rows: int, num_loras: int, rank: int, act_bytes: float) -> list[tuple[LoraOp, int]]:
    """(op, multiplicity) of the lm_head's LoRA kernels over a step's ``rows`` sampled rows: shrink +
    expand, on the logits gathered over TP (every rank, the whole vocabulary)."""
    h, vocab = model.hidden_size, model.vocab_size
    return [(LoraOp("lm_head_lora_shrink", "shrink", rows, h, vocab, rank, 1, num_loras, act_bytes=act_bytes), 1),
            (LoraOp("lm_head_lora_expand", "expand", rows, h, vocab, rank, 1, num_loras, act_bytes=act_bytes), 1)]


LORA_PRICING_NOTE = ("LoRA: the adapters' punica kernels (shrink / expand per wrapped layer) are priced by the "
                     "roofline (no measured tables time them); an adapter's copy into a GPU slot by the host link, "
                     "its disk reads not at all")


class AdapterCache:
    """The adapters resident on one engine's GPUs and in its CPU cache, as vLLM's
    ``LRUCacheWorkerLoRAManager`` keeps them (module docstring): ``apply`` makes a step's
    adapters resident and returns (copies into GPU slots, reads from disk); ``gpu_loads`` /
    ``disk_loads`` count them over the run."""

    def __init__(self, config: LoraConfig) -> None:
        self.gpu_slots = config.max_loras
        self.cpu_slots = config.max_cpu_loras or config.max_loras
        self._gpu: OrderedDict[int, None] = OrderedDict()
        self._cpu: OrderedDict[int, None] = OrderedDict()
        self.gpu_loads = 0
        self.disk_loads = 0

    def apply(self, lora_ids: tuple[int, ...]) -> tuple[int, int]:
        """Make ``lora_ids`` (at most gpu_slots) resident, visiting them in the given order (the
        scheduler's: ascending ids; vLLM visits a set of requests hashed by adapter name, an order
        that varies with the process's hash seed, so which slot an adapter evicts within one step
        may differ; the counts differ only when one step brings in several new adapters)."""
        gpu, cpu = self._gpu, self._cpu
        copies = reads = 0
        for a in lora_ids:
            if a in cpu:
                cpu.move_to_end(a)
            else:                       # _load_adapter from disk; the oldest leaves the CPU cache (and its slot)
                reads += 1
                if len(cpu) + 1 > self.cpu_slots:
                    old, _ = cpu.popitem(last=False)
                    gpu.pop(old, None)
                cpu[a] = None
            if a in gpu:
                gpu.move_to_end(a)
            else:                       # activate_adapter: into the least recently used slot
                copies += 1
                if len(gpu) >= self.gpu_slots:
                    gpu.popitem(last=False)
                gpu[a] = None
        self.gpu_loads += copies
        self.disk_loads += reads
        return copies, reads


def adapter_copy_s(model: ModelSpec, parallel: ParallelSpec, config: LoraConfig, host_bw_bytes_per_s: float) -> float:
    """Seconds to copy one adapter into a GPU slot on each rank (its share of the slots, over the
    rank's own host link at HOST_COPY_EFF); 0 when the host link's speed is not known."""
    if host_bw_bytes_per_s <= 0:
        return 0.0
    return slot_bytes_per_rank(model, parallel, config) / config.max_loras / (host_bw_bytes_per_s * HOST_COPY_EFF)
