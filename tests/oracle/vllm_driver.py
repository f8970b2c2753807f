"""Drive the REAL vLLM 0.33 scheduler on a CPU and record what it schedules.

Importable only where ``vllm==0.33.0`` is installed (``scripts/install_oracle.sh``).
The scheduler never touches weights: it is given a fixed KV block count and a
fake model runner whose every sampled token id is 0 (``OUTPUT_TOKEN_ID`` in the
simulator is also 0), with ``ignore_eos=True`` and ``max_tokens=output_len``.

Trace format: one dict per executed step, ``{request_id: num_scheduled_tokens}``
in the order the scheduler granted tokens (``SchedulerOutput.num_scheduled_tokens``
is filled in grant order: the running scan first, in ``running`` list order, then
admitted waiting requests in admission order). Steps that scheduled no token
(``total_num_scheduled_tokens == 0``) are not GPU steps and are left out.

Fake model runner. A request samples one token (id 0) in a step iff that step
reached the end of its known tokens. This is decided right after the
``schedule()`` call that produced the step, from ``request.is_prefill_chunk``
which ``Scheduler._update_after_schedule`` sets to
``num_computed_tokens < num_tokens + num_output_placeholders`` (the counter has
already been advanced by the scheduled tokens). A partial prefill chunk samples
nothing. The decision is snapshotted at schedule time because, with async
scheduling, the request may be preempted (``num_computed_tokens`` reset to 0)
before that step's output is processed; the real GPU runner would still have
sampled for it.

Synchronous protocol (``EngineCore.step``, batch queue off)::

    while scheduler.has_requests():
        out = scheduler.schedule()
        sampled = fake_sample(out)                 # snapshot, see above
        scheduler.update_from_output(out, sampled)

Asynchronous protocol (``AsyncScheduler`` + ``EngineCore.step_with_batch_queue``
with ``batch_queue_size = max_concurrent_batches = 2``). One call of
``step_with_batch_queue`` is mirrored as::

    if scheduler.has_requests():
        out = scheduler.schedule(); queue.appendleft((fake_sample(out), out))
        if len(queue) < 2 and (out.total_num_scheduled_tokens > 0
                               or scheduler.has_requests()):
            return                                  # fill the queue first
    elif not queue:
        return
    sampled, out = queue.pop()                      # oldest batch
    scheduler.update_from_output(out, sampled)

and the busy loop calls it while ``scheduler.has_requests() or queue``
(``EngineCore.has_work``). Timeline (S = schedule, U = update_from_output)::

    call 1:  S1                 (queue [1]    -> return, queue not full)
    call 2:  S2  U1             (queue [2,1]  -> pop 1)
    call 3:  S3  U2             ...
    call k:      U(k-1)         (no requests left to schedule: just drain)

So step N+1 is scheduled before step N's output is processed; decodes carry
``num_output_placeholders`` and are rescheduled without waiting, and finishes
are seen one step late.

Speculative decoding (EAGLE): ``run_vllm_spec_scheduler``, whose docstring gives the
fake drafter and where the draft calls go in both loops.

Hybrid KV cache (``kv_groups``): one KV cache group per entry, in group order, all
sharing one block pool of ``num_gpu_blocks`` blocks (the engine's uniform-page-size
grouping, as gpt-oss or Gemma-3 get on a GPU): 0 = full attention
(``FullAttentionSpec``), W > 0 = sliding window of W tokens (``SlidingWindowSpec``),
-C < 0 = Llama 4's chunked local attention of C-token chunks (``ChunkedLocalAttentionSpec``),
``STATE`` = a Gated DeltaNet group's states (``MambaSpec`` in the "none" mamba cache mode, block
size max_model_len; prefix caching off, as that mode requires: its scheduler block size is then
the groups' LCM, which only a KV connector or the "align" mode would read), ``STATE_ALIGN`` = a
Gated DeltaNet group as Qwen3.5 gets it on Hopper with prefix caching on (``MambaSpec`` in the
"align" mamba cache mode, block size ``block_size``, one prefill checkpoint block aligned to
``block_size``, as FlashInfer's GDN prefill asks; ``_build_scheduler`` sets
``CacheConfig.mamba_cache_mode = "align"`` and ``mamba_block_size = block_size``, which vLLM's
hybrid-model hook would set and the tiny Llama config does not trigger). ``STATE_ALIGN`` needs
prefix caching, and mixes only with full attention (0): its
prefill chunks end on multiples of ``block_size`` unless they end the prefill, and its states are
prefix-cached at the prompt's last block boundary and at the shared-prefix junction.
The scheduler only sees the ``KVCacheConfig`` (``_kv_cache_config``): no sliding
window in the model config is needed, since the scheduler and its KV cache manager
read none. ``KVCacheConfig.prefix_cache_retention_interval`` is
``CacheConfig.prefix_cache_retention_interval`` (default 0), as the engine's
``get_kv_cache_config_from_groups`` sets it. All groups have ``block_size``, so the
scheduler block size (the groups' LCM) and the hash block size (their GCD) are
``block_size``, as ``resolve_kv_cache_block_sizes`` gives. (On this CPU, VllmConfig
resolves ``scheduler_config.disable_hybrid_kv_cache_manager`` to True, the
``UnspecifiedPlatform`` not supporting hybrid KV caches; neither the scheduler nor its
KV cache manager reads it, only the engine's KV cache planning, which the driver replaces
by giving the groups itself, and some KV connectors.) With an EAGLE drafter (no KV connector) the
draft layer joins the first full-attention group, flagged ``is_eagle_group``, as vLLM groups
gpt-oss + an EAGLE-3 head (``_kv_cache_config``, ``_check_eagle_kv_cache``).

All requests arrive at t=0 (``arrival_time=0.0``) and are added in list order,
so the priority heap's tie-break ``(priority, arrival_time, request_id)`` falls
to ``request_id``: give zero-padded ids when list order must win ties.
``prompt_token_ids=None`` gets ids no other request shares:
``1 + index * 1_000_003 + position`` (never 0, the output token id).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import deque
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    LoRAConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.lora.request import LoRARequest
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256_cbor
from vllm.v1.core.kv_cache_coordinator import (
    HybridKVCacheCoordinator,
    KVCacheCoordinatorNoPrefixCache,
    UnitaryKVCacheCoordinator,
)
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import (
    ChunkedLocalAttentionManager,
    FullAttentionManager,
    MambaManager,
    SlidingWindowManager,
)
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request

OUTPUT_TOKEN_ID = 0
# a ``kv_groups`` entry for a Gated DeltaNet group: a ``MambaSpec`` in the "none" mamba cache mode
# (block size max_model_len: one state block per request), as Qwen3.5 without prefix caching
STATE = "state"
# a ``kv_groups`` entry for a Gated DeltaNet group in the "align" mamba cache mode (block size
# block_size, one prefill checkpoint block), as Qwen3.5 with prefix caching on Hopper
STATE_ALIGN = "state_align"
# the prefill checkpoint alignment of ``STATE_ALIGN`` groups' specs: None = the block size (FlashInfer's
# GDN prefill, whose 64 divides the aligned block), 1 = Mamba2's (vLLM MambaMixer2.get_kv_cache_spec:
# a checkpoint at any token position); a test sets it
MAMBA_CHECKPOINT_ALIGNMENT: int | None = None
_UNIQUE_ID_STRIDE = 1_000_003
_NUM_KV_HEADS = 8
_HEAD_DIM = 128

# A Llama-shaped config.json; ModelConfig only reads it, no weights are loaded.
_TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": _NUM_KV_HEADS * _HEAD_DIM,
    "intermediate_size": 2048,
    "num_attention_heads": _NUM_KV_HEADS,
    "num_key_value_heads": _NUM_KV_HEADS,
    "head_dim": _HEAD_DIM,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


# An EAGLE-LLaMA draft head's config.json: one decoder layer of the target's shape.
_TINY_EAGLE_DRAFT_CONFIG = {**_TINY_LLAMA_CONFIG, "num_hidden_layers": 1}
# A separate draft model (method "draft_model"): a smaller Llama with the target's vocabulary.
_TINY_DRAFT_MODEL_CONFIG = {**_TINY_LLAMA_CONFIG, "num_hidden_layers": 1, "intermediate_size": 512,
                            "hidden_size": 4 * _HEAD_DIM, "num_attention_heads": 4, "num_key_value_heads": 2}
SPEC_METHODS = ("eagle", "draft_model")   # what run_vllm_spec_scheduler drafts with


class RequestLike(Protocol):
    """What the driver reads from a request (``simulator.request.RequestSpec`` fits)."""

    request_id: str
    prompt_len: int
    output_len: int
    priority: int
    prompt_token_ids: tuple[int, ...] | None


class _NoStructuredOutput:
    """Stand-in StructuredOutputManager: accepts every token, does nothing else."""

    def accept_tokens(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def validate_tokens(self, request: Request, spec_tokens: list[int]) -> list[int]:
        return spec_tokens   # the real one for a request without structured output

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _prompt_ids(req: RequestLike, index: int) -> list[int]:
    if req.prompt_token_ids is not None:
        if len(req.prompt_token_ids) != req.prompt_len:
            raise ValueError(
                f"request {req.request_id}: len(prompt_token_ids)="
                f"{len(req.prompt_token_ids)} != prompt_len={req.prompt_len}"
            )
        return list(req.prompt_token_ids)
    base = 1 + index * _UNIQUE_ID_STRIDE
    return list(range(base, base + req.prompt_len))


def _eagle_config(
    target: ModelConfig, parallel_config: ParallelConfig, draft_dir: Path, k: int, method: str = "eagle"
) -> SpeculativeConfig:
    """EAGLE (method "eagle") drafting ``k`` tokens, built as ``EngineArgs`` builds it.

    The draft dir holds a one-layer Llama config.json (as EAGLE-LLaMA checkpoints ship);
    ``SpeculativeConfig.__post_init__`` wraps it in ``EAGLEConfig``
    (architecture ``EagleLlamaForCausalLM``). No weights are read. ``method`` "draft_model":
    the dir holds a small Llama of the target's vocabulary (``_TINY_DRAFT_MODEL_CONFIG``), a
    separate draft model.
    """
    return SpeculativeConfig(
        method=method,
        model=str(draft_dir),
        num_speculative_tokens=k,
        target_model_config=target,
        target_parallel_config=parallel_config,
    )


def _check_eagle_scheduler(scheduler: Scheduler, k: int, method: str = "eagle") -> None:
    """The EAGLE-family settings the spec oracle stands on, as vLLM resolved them.

    Model runner V2 is the 0.33 GPU default for EAGLE (``VllmConfig.use_v2_model_runner``:
    no unsupported feature); without a CPU platform plugin vLLM resolves the
    ``UnspecifiedPlatform``, which keeps V2 too. Hence ``can_skip_drafts``. A draft model
    (``method`` "draft_model", V2's ``StandaloneARSpeculator``) reads no prefill lookahead and
    takes one input slot per scheduled request (``max_num_new_slots_for_drafting``).
    """
    spec = scheduler.vllm_config.speculative_config
    effective = {
        "num_spec_tokens": scheduler.num_spec_tokens,
        "num_lookahead_tokens": scheduler.num_lookahead_tokens,
        "num_prefill_lookahead": scheduler.num_prefill_lookahead,
        "draft_slots": spec.max_num_new_slots_for_drafting,
        "use_v2_model_runner": scheduler.use_v2_model_runner,
        "can_skip_drafts": scheduler.can_skip_drafts,
        "dynamic_sd_lookup": scheduler.dynamic_sd_lookup,
    }
    wanted = {
        "num_spec_tokens": k,
        "num_lookahead_tokens": k,
        "num_prefill_lookahead": 1 if method == "eagle" else 0,
        "draft_slots": 0 if method == "eagle" else 1,
        "use_v2_model_runner": True,
        "can_skip_drafts": True,
        "dynamic_sd_lookup": None,
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM resolved {method} differently: wanted {wanted}, got {effective}")


def _build_scheduler(
    model_dir: Path,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    block_size: int,
    num_gpu_blocks: int,
    enable_prefix_caching: bool,
    long_prefill_token_threshold: int,
    policy: str,
    async_scheduling: bool,
    watermark: float,
    kv_transfer_config: Any = None,
    pipeline_parallel_size: int = 1,
    num_speculative_tokens: int = 0,
    kv_groups: tuple[int, ...] = (),
    spec_method: str = "eagle",
    max_loras: int = 0,
    **scheduler_knobs: Any,
) -> Scheduler:
    """A vLLM scheduler over ``num_gpu_blocks`` blocks; ``scheduler_knobs``: further
    ``SchedulerConfig`` fields as given (max_num_active_seqs, prefill_schedule_interval, ...).
    ``num_speculative_tokens`` > 0 adds the EAGLE drafter of ``_eagle_config`` (its
    config.json in ``model_dir / "draft"``). ``kv_groups``: the KV cache groups of
    ``_kv_cache_config`` (empty: one full-attention group), checked on the built
    scheduler by ``_check_kv_groups``; with a drafter they need a full-attention group and,
    behind a KV connector, no local-attention groups, and EAGLE in the KV cache manager is checked
    by ``_check_eagle_kv_cache``. ``spec_method`` "draft_model": the drafter is a separate draft
    model (``_eagle_config``), only over one full-attention group. ``max_loras`` > 0: LoRA on
    (``LoRAConfig``, rank 16), the requests' ``lora_id`` their adapters (``add_requests``)."""
    if spec_method not in SPEC_METHODS:
        raise ValueError(f"spec_method {spec_method!r}; valid: {', '.join(SPEC_METHODS)}")
    if spec_method != "eagle" and (kv_groups or kv_transfer_config is not None):
        raise ValueError("a draft model only over one full-attention group, without a KV connector")
    kv_groups = tuple(kv_groups)
    if STATE_ALIGN in kv_groups:
        _check_align_request(kv_groups, enable_prefix_caching)
    state_only = all(w in (STATE, STATE_ALIGN, 0) for w in kv_groups)
    if kv_groups and num_speculative_tokens and (kv_transfer_config is not None and not state_only
                                                 or 0 not in kv_groups
                                                 or any(isinstance(w, int) and w < 0 for w in kv_groups)):
        raise ValueError("kv_groups with a drafter: behind a KV connector only with Gated DeltaNet state groups, "
                         "without chunked groups (vLLM disables the hybrid manager there) and with a "
                         "full-attention group (0), which the draft layer joins")
    model_config = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=max_model_len,
    )
    parallel_config = ParallelConfig(pipeline_parallel_size=pipeline_parallel_size)
    speculative_config = None
    if num_speculative_tokens:
        speculative_config = _eagle_config(
            model_config, parallel_config, model_dir / "draft", num_speculative_tokens, spec_method
        )
    scheduler_config = SchedulerConfig(
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_chunked_prefill=True,
        long_prefill_token_threshold=long_prefill_token_threshold,
        policy=policy,
        async_scheduling=async_scheduling,
        watermark=watermark,
        **scheduler_knobs,
    )
    cache_config = CacheConfig(
        block_size=block_size, enable_prefix_caching=enable_prefix_caching
    )
    cache_config.num_gpu_blocks = num_gpu_blocks
    vllm_config = VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        device_config=DeviceConfig("cpu"),
        kv_transfer_config=kv_transfer_config,
        parallel_config=parallel_config,
        speculative_config=speculative_config,
        lora_config=LoRAConfig(max_loras=max_loras, max_lora_rank=16) if max_loras else None,
    )
    # VllmConfig may re-resolve these; the oracle must run exactly what was asked.
    vllm_config.scheduler_config.async_scheduling = async_scheduling
    vllm_config.cache_config.num_gpu_blocks = num_gpu_blocks
    if STATE_ALIGN in kv_groups:
        # what MambaModelConfig.verify_and_update_config and _align_hybrid_block_size set for a hybrid
        # model with prefix caching; the scheduler reads mamba_cache_mode (need_mamba_block_aligned_split)
        vllm_config.cache_config.mamba_cache_mode = "align"
        vllm_config.cache_config.mamba_block_size = block_size
    kv_cache_config = _kv_cache_config(
        num_gpu_blocks, block_size, kv_groups, num_speculative_tokens > 0 and spec_method == "eagle",
        vllm_config.cache_config.prefix_cache_retention_interval, max_model_len, num_speculative_tokens,
    )
    cls = AsyncScheduler if async_scheduling else Scheduler
    sizes = {}
    if STATE in kv_groups or STATE_ALIGN in kv_groups:   # EngineCore's block sizes (resolve_kv_cache_block_sizes)
        scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        sizes = {"block_size": scheduler_block_size, "hash_block_size": hash_block_size}
    scheduler = cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=_NoStructuredOutput(),
        **(sizes or {"block_size": block_size}),
    )
    effective = {
        "max_num_seqs": scheduler.max_num_running_reqs,
        "max_num_active_seqs": scheduler.max_num_active_reqs,
        "max_num_batched_tokens": scheduler.max_num_scheduled_tokens,
        "max_model_len": scheduler.max_model_len,
        "long_prefill_token_threshold": scheduler.scheduler_config.long_prefill_token_threshold,
        "enable_prefix_caching": scheduler.kv_cache_manager.enable_caching,
        "max_concurrent_batches": vllm_config.max_concurrent_batches,
        "max_loras": scheduler.lora_config.max_loras if scheduler.lora_config else 0,
    }
    wanted = {
        "max_num_seqs": max_num_seqs,
        "max_num_active_seqs": scheduler_knobs.get("max_num_active_seqs") or max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_model_len": max_model_len,
        "long_prefill_token_threshold": long_prefill_token_threshold,
        "enable_prefix_caching": enable_prefix_caching,
        # model runner V2 (the default): pp + 1 with async scheduling, else pp (2 / 1 without PP)
        "max_concurrent_batches": (pipeline_parallel_size + 1 if async_scheduling else pipeline_parallel_size)
        if pipeline_parallel_size > 1 else (2 if async_scheduling else 1),
        "max_loras": max_loras,
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM changed the scheduler knobs: asked {wanted}, got {effective}")
    _check_kv_groups(scheduler, kv_groups or (0,), enable_prefix_caching, num_gpu_blocks, block_size, max_model_len)
    if num_speculative_tokens and spec_method == "eagle":
        _check_eagle_kv_cache(scheduler, kv_groups or (0,), enable_prefix_caching, kv_transfer_config is not None)
    elif num_speculative_tokens:
        _check_no_eagle_kv_cache(scheduler)
    return scheduler


def _check_no_eagle_kv_cache(scheduler: Scheduler) -> None:
    """A draft model in the KV cache manager, as vLLM resolved it: no EAGLE group, plain block
    hashes (``num_hash_lookahead_tokens`` 0), no hit-block drop."""
    coordinator = scheduler.kv_cache_manager.coordinator
    effective = {"eagle_group_ids": coordinator.eagle_group_ids,
                 "drop_eagle_group_ids": coordinator.drop_eagle_group_ids,
                 "num_hash_lookahead_tokens": scheduler.num_hash_lookahead_tokens,
                 "use_eagle_block_drop": scheduler.use_eagle_block_drop,
                 "kv_cache_manager_use_eagle": scheduler.kv_cache_manager.use_eagle}
    wanted = {"eagle_group_ids": set(), "drop_eagle_group_ids": set(), "num_hash_lookahead_tokens": 0,
              "use_eagle_block_drop": False, "kv_cache_manager_use_eagle": False}
    if effective != wanted:
        raise RuntimeError(f"vLLM resolved the draft model in the KV cache differently: wanted {wanted}, "
                           f"got {effective}")


def _check_align_request(kv_groups: tuple[int | str, ...], enable_prefix_caching: bool) -> None:
    """Raise ValueError unless ``kv_groups`` with ``STATE_ALIGN`` is a setup the driver models: prefix
    caching on (vLLM picks the "align" mode only then), only ``STATE_ALIGN`` and full-attention (0)
    entries."""
    if not enable_prefix_caching:
        raise ValueError("kv_groups with STATE_ALIGN: the \"align\" mamba cache mode needs enable_prefix_caching=True")
    if any(w not in (STATE_ALIGN, 0) for w in kv_groups):
        raise ValueError(f"kv_groups with STATE_ALIGN: only STATE_ALIGN and 0 entries, got {kv_groups}")


def _kv_cache_config(
    num_gpu_blocks: int,
    block_size: int,
    kv_groups: tuple[int, ...],
    is_eagle_group: bool,
    retention_interval: int | None,
    max_model_len: int = 0,
    num_speculative_tokens: int = 0,
) -> KVCacheConfig:
    """The scheduler's ``KVCacheConfig``: one group per ``kv_groups`` entry (layer
    ``layer{i}``), or the single full-attention group ``layer`` when it is empty.

    ``is_eagle_group`` (an EAGLE drafter): the draft layer's KV spec is the target's
    full-attention one (``is_draft`` is not compared), so ``_get_kv_cache_groups_uniform_page_size``
    puts it in the full-attention bucket and ``get_kv_cache_groups_from_builder``'s caller flags
    the group holding it ``is_eagle_group`` (``use_eagle_block_drop()``). Hybrid: the layer
    ``draft_layer`` joins the first full-attention group, which is flagged (gpt-oss + EAGLE-3:
    12 sliding + 12 full + 1 draft layers are padded to groups (sliding x13, full x13 incl. the
    draft); with several full-attention groups vLLM would put it in the group
    ``num_full_layers % num_full_groups``, not modelled). A mamba group's spec holds
    ``num_speculative_tokens`` speculative state blocks per request (``MambaBase.get_kv_cache_spec``
    with a drafter)."""

    def spec(window: int | str) -> FullAttentionSpec | SlidingWindowSpec | ChunkedLocalAttentionSpec | MambaSpec:
        if window == STATE:     # GDN-like state shapes; the scheduler reads the block size and mode only
            return MambaSpec(block_size=max_model_len, shapes=((3, 64), (8, 128, 128)),
                             dtypes=(torch.bfloat16, torch.float32), mamba_cache_mode="none",
                             num_speculative_blocks=num_speculative_tokens)
        if window == STATE_ALIGN:   # FlashInfer's GDN prefill (SM90): one checkpoint block per prefill
            return MambaSpec(block_size=block_size, shapes=((3, 64), (8, 128, 128)),
                             dtypes=(torch.bfloat16, torch.float32), mamba_cache_mode="align",
                             num_prefill_checkpoint_blocks=1,
                             prefill_checkpoint_alignment=MAMBA_CHECKPOINT_ALIGNMENT or block_size,
                             num_speculative_blocks=num_speculative_tokens)
        if window == 0:
            return FullAttentionSpec(block_size=block_size, num_kv_heads=_NUM_KV_HEADS,
                                     head_size=_HEAD_DIM, dtype=torch.bfloat16)
        if window < 0:
            return ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=_NUM_KV_HEADS,
                                             head_size=_HEAD_DIM, dtype=torch.bfloat16,
                                             attention_chunk_size=-window)
        return SlidingWindowSpec(block_size=block_size, num_kv_heads=_NUM_KV_HEADS,
                                 head_size=_HEAD_DIM, dtype=torch.bfloat16, sliding_window=window)

    if not kv_groups:
        groups = [
            # the drafter's layer has the target's KV spec, so it joins this group
            KVCacheGroupSpec(["layer"], spec(0), is_eagle_group=is_eagle_group)
        ]
    else:
        groups = [KVCacheGroupSpec([f"layer{i}"], spec(w)) for i, w in enumerate(kv_groups)]
        if is_eagle_group:
            eagle = groups[kv_groups.index(0)]
            eagle.layer_names.append("draft_layer")
            eagle.is_eagle_group = True
    return KVCacheConfig(
        num_blocks=num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=groups,
        # as the engine's get_kv_cache_config_from_groups: the CacheConfig value
        prefix_cache_retention_interval=retention_interval,
    )


def _check_kv_groups(
    scheduler: Scheduler,
    kv_groups: tuple[int, ...],
    enable_prefix_caching: bool,
    num_gpu_blocks: int,
    block_size: int,
    max_model_len: int = 0,
) -> None:
    """The KV cache manager vLLM built has the groups asked for, in order, over one pool."""
    coordinator = scheduler.kv_cache_manager.coordinator

    def group(manager: Any) -> Any:
        if type(manager) is SlidingWindowManager:
            return manager.sliding_window
        if type(manager) is ChunkedLocalAttentionManager:
            return -manager.attention_chunk_size
        if type(manager) is FullAttentionManager:
            return 0
        if type(manager) is MambaManager and manager.mamba_cache_mode == "none":
            return STATE
        if type(manager) is MambaManager and manager.mamba_cache_mode == "align":
            return STATE_ALIGN
        return type(manager).__name__

    if not enable_prefix_caching:
        coordinator_cls = KVCacheCoordinatorNoPrefixCache
    elif len(kv_groups) == 1:
        coordinator_cls = UnitaryKVCacheCoordinator
    else:
        coordinator_cls = HybridKVCacheCoordinator
    managers = coordinator.single_type_managers
    effective = {
        "kv_groups": tuple(group(m) for m in managers),
        "coordinator": type(coordinator).__name__,
        "one_pool": all(m.block_pool is scheduler.kv_cache_manager.block_pool for m in managers),
        "num_blocks": scheduler.kv_cache_manager.block_pool.num_gpu_blocks,
        "block_sizes": tuple(m.block_size for m in managers),
        "scheduler_block_size": coordinator.scheduler_block_size,
        "hash_block_size": scheduler.hash_block_size,
    }
    wanted = {
        "kv_groups": kv_groups,
        "coordinator": coordinator_cls.__name__,
        "one_pool": True,
        "num_blocks": num_gpu_blocks,
        "block_sizes": tuple(max_model_len if w == STATE else block_size for w in kv_groups),
        "scheduler_block_size": math.lcm(block_size, max_model_len) if STATE in kv_groups else block_size,
        "hash_block_size": math.lcm(block_size, max_model_len) if STATE in kv_groups else block_size,
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM built other KV cache groups: asked {wanted}, got {effective}")
    if STATE_ALIGN in kv_groups:
        _check_align_mode(scheduler, kv_groups, block_size)


def _check_align_mode(scheduler: Scheduler, kv_groups: tuple[int | str, ...], block_size: int) -> None:
    """The "align" mamba cache mode as vLLM resolved it for ``STATE_ALIGN`` groups: block-aligned
    prefill splits with one checkpoint block aligned to ``block_size``, hits aligned to
    ``block_size`` (no fine-grained partial hits), prefix-cache retention 0 (mamba states cached
    only at the prompt's last block boundary and the shared-prefix junction)."""
    coordinator = scheduler.kv_cache_manager.coordinator
    mambas = [m for m, w in zip(coordinator.single_type_managers, kv_groups) if w == STATE_ALIGN]
    effective = {
        "mamba_cache_mode": scheduler.cache_config.mamba_cache_mode,
        "need_mamba_block_aligned_split": scheduler.need_mamba_block_aligned_split,
        "mamba_has_prefill_checkpoint_blocks": scheduler.mamba_has_prefill_checkpoint_blocks,
        "mamba_prefill_checkpoint_alignment": scheduler.mamba_prefill_checkpoint_alignment,
        "mamba_partial_cache_hit": scheduler.mamba_partial_cache_hit,
        "checkpoint_blocks": tuple(m.kv_cache_spec.num_prefill_checkpoint_blocks for m in mambas),
        "cache_hit_alignment_tokens": tuple(m.cache_hit_alignment_tokens for m in mambas),
        "retention_interval": coordinator.retention_interval,
    }
    wanted = {
        "mamba_cache_mode": "align",
        "need_mamba_block_aligned_split": True,
        "mamba_has_prefill_checkpoint_blocks": True,
        "mamba_prefill_checkpoint_alignment": MAMBA_CHECKPOINT_ALIGNMENT or block_size,
        "mamba_partial_cache_hit": False,
        "checkpoint_blocks": (1,) * len(mambas),
        "cache_hit_alignment_tokens": (block_size,) * len(mambas),
        "retention_interval": 0,
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM resolved the align mamba mode differently: asked {wanted}, got {effective}")


def _check_eagle_kv_cache(
    scheduler: Scheduler, kv_groups: tuple[int, ...], enable_prefix_caching: bool, kv_connector: bool
) -> None:
    """EAGLE in the KV cache manager, as vLLM resolved it: the first full-attention group is the
    EAGLE group; with prefix caching and no KV connector blocks are hashed with the token after
    them (``VllmConfig.num_hash_lookahead_tokens`` 1), which clears ``use_eagle_block_drop``, so
    the coordinator drops no group's last hit block (``drop_eagle_group_ids`` empty); otherwise the
    EAGLE group gets the drop (inert without prefix caching). A manager is flagged ``use_eagle``
    only by the caching coordinators, from ``drop_eagle_group_ids``: then none, behind a KV
    connector with prefix caching the EAGLE group's."""
    coordinator = scheduler.kv_cache_manager.coordinator
    eagle_ids = {kv_groups.index(0)}
    lookahead = 1 if enable_prefix_caching and not kv_connector else 0
    effective = {
        "eagle_group_ids": coordinator.eagle_group_ids,
        "drop_eagle_group_ids": coordinator.drop_eagle_group_ids,
        "num_hash_lookahead_tokens": scheduler.num_hash_lookahead_tokens,
        "block_pool_lookahead": coordinator.block_pool.num_hash_lookahead_tokens,
        "use_eagle_block_drop": scheduler.use_eagle_block_drop,
        "kv_cache_manager_use_eagle": scheduler.kv_cache_manager.use_eagle,
        "managers_use_eagle": tuple(m.use_eagle for m in coordinator.single_type_managers),
    }
    wanted = {
        "eagle_group_ids": eagle_ids,
        "drop_eagle_group_ids": set() if lookahead else eagle_ids,
        "num_hash_lookahead_tokens": lookahead,
        "block_pool_lookahead": lookahead,
        "use_eagle_block_drop": not lookahead,
        "kv_cache_manager_use_eagle": not lookahead,
        "managers_use_eagle": tuple(enable_prefix_caching and not lookahead and i in eagle_ids
                                    for i in range(len(kv_groups))),
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM resolved EAGLE in the KV cache differently: wanted {wanted}, got {effective}")


def _fake_sample(scheduler: Scheduler, out: Any) -> ModelRunnerOutput:
    """Model output for ``out``, decided right after the schedule() that made it."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = [
        [] if scheduler.requests[rid].is_prefill_chunk else [OUTPUT_TOKEN_ID]
        for rid in req_ids
    ]
    return _runner_output(req_ids, sampled)


def _runner_output(req_ids: list[str], sampled: list[list[int]]) -> ModelRunnerOutput:
    """The fake runner's output: ``sampled[i]`` the token ids request ``req_ids[i]`` sampled."""
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def _record(trace: list[dict[str, int]], out: Any) -> None:
    if out.total_num_scheduled_tokens > 0:
        trace.append(dict(out.num_scheduled_tokens))


class _OneTokenRunner:
    """The fake model runner without a drafter: ``_fake_sample`` and ``_record``."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def execute(self, out: Any) -> ModelRunnerOutput:
        return _fake_sample(self.scheduler, out)

    def record(self, trace: list[Any], out: Any) -> None:
        _record(trace, out)

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        return None   # no drafter (EngineCore.check_for_draft_tokens is False)


class _EagleRunner:
    """Fake model runner V2 with an EAGLE drafter (protocol: ``run_vllm_spec_scheduler``)."""

    def __init__(self, scheduler: Scheduler, accepted: Callable[[str, int, int], int]) -> None:
        self.scheduler = scheduler
        self.accepted = accepted
        # request -> real drafts proposed after its last executed step (req_states.draft_tokens)
        self.num_drafts: dict[str, int] = {}
        self.drafts = DraftTokenIds([], [])   # DraftTokensHandler: the last step's proposals

    def execute(self, out: Any) -> ModelRunnerOutput:
        """Model output for ``out``, decided right after the schedule() that made it."""
        for new_req in out.scheduled_new_reqs:   # V2 sends resumed requests as new too
            self.num_drafts[new_req.req_id] = 0
        req_ids = list(out.num_scheduled_tokens)
        sampled = [self._sample(out, rid) for rid in req_ids]
        proposed = 0 if out.skip_drafts else out.num_spec_tokens_to_schedule
        self.num_drafts.update(dict.fromkeys(req_ids, proposed))
        self.drafts = DraftTokenIds(req_ids, [[-1] * proposed for _ in req_ids])
        return _runner_output(req_ids, sampled)

    def _sample(self, out: Any, rid: str) -> list[int]:
        request = self.scheduler.requests[rid]
        if request.is_prefill_chunk:
            return []
        num_scheduled = out.num_scheduled_tokens[rid]
        num_spec = len(out.scheduled_spec_decode_tokens.get(rid, ()))
        num_real = min(num_spec, self.num_drafts[rid])
        if not num_real:
            return [OUTPUT_TOKEN_ID]
        context_len = request.num_computed_tokens - num_scheduled
        accepted = self.accepted(rid, context_len, num_real)
        if not 0 <= accepted <= num_real:
            raise ValueError(f"accepted({rid!r}, {context_len}, {num_real}) = {accepted}")
        return [OUTPUT_TOKEN_ID] * (accepted + 1)

    def record(self, trace: list[Any], out: Any) -> None:
        if out.total_num_scheduled_tokens > 0:
            spec = out.scheduled_spec_decode_tokens
            trace.append(
                {rid: (n, len(spec.get(rid, ()))) for rid, n in out.num_scheduled_tokens.items()}
            )

    def take_draft_token_ids(self) -> DraftTokenIds:
        return self.drafts


_Runner = _OneTokenRunner | _EagleRunner


def _record_free_blocks(free_blocks: list[int] | None, scheduler: Scheduler, out: Any) -> None:
    """Free KV blocks right after the schedule() that made ``out``, for the steps
    ``_record`` keeps (evictable prefix-cached blocks count as free)."""
    if free_blocks is not None and out.total_num_scheduled_tokens > 0:
        free_blocks.append(scheduler.kv_cache_manager.block_pool.get_num_free_blocks())


def _run_sync(
    scheduler: Scheduler,
    max_steps: int,
    runner: _Runner | None = None,
    free_blocks: list[int] | None = None,
) -> list[Any]:
    runner = runner or _OneTokenRunner(scheduler)
    trace: list[Any] = []
    for _ in range(max_steps):
        if not scheduler.has_requests():
            return trace
        out = scheduler.schedule()
        _record_free_blocks(free_blocks, scheduler, out)
        sampled = runner.execute(out)
        runner.record(trace, out)
        scheduler.update_from_output(out, sampled)
        if out.total_num_scheduled_tokens > 0:   # EngineCore.post_step(model_executed)
            drafts = runner.take_draft_token_ids()
            if drafts is not None:
                scheduler.update_draft_token_ids(drafts)
    raise RuntimeError(f"vLLM scheduler still busy after {max_steps} schedule() calls")


def _run_async(
    scheduler: Scheduler,
    max_steps: int,
    batch_queue_size: int = 2,
    runner: _Runner | None = None,
    free_blocks: list[int] | None = None,
) -> list[Any]:
    """No draft calls: under async scheduling ``EngineCore.post_step`` takes none, and
    ``step_with_batch_queue`` takes them only for a step deferred for structured output
    (none here); ``AsyncScheduler`` schedules -1 placeholders the GPU fills in."""
    runner = runner or _OneTokenRunner(scheduler)
    trace: list[Any] = []
    batch_queue: deque[tuple[ModelRunnerOutput, Any]] = deque(maxlen=batch_queue_size)
    for _ in range(max_steps):
        if not (scheduler.has_requests() or batch_queue):  # EngineCore.has_work
            return trace
        # ---- one EngineCore.step_with_batch_queue() call ----
        if scheduler.has_requests():
            out = scheduler.schedule()
            _record_free_blocks(free_blocks, scheduler, out)
            model_executed = out.total_num_scheduled_tokens > 0
            batch_queue.appendleft((runner.execute(out), out))
            runner.record(trace, out)
            if len(batch_queue) < batch_queue_size and (
                model_executed or scheduler.has_requests()
            ):
                continue
        elif not batch_queue:
            continue
        sampled, out = batch_queue.pop()
        scheduler.update_from_output(out, sampled)
    raise RuntimeError(f"vLLM scheduler still busy after {max_steps} engine steps")


def new_scheduler(
    *,
    block_size: int,
    enable_prefix_caching: bool,
    num_speculative_tokens: int = 0,
    kv_groups: tuple[int, ...] = (),
    spec_method: str = "eagle",
    **knobs: Any,
) -> tuple[Scheduler, Any]:
    """A vLLM scheduler on the tiny Llama config (``_build_scheduler``'s knobs) and the block
    hasher its requests need (None without prefix caching). ``num_speculative_tokens`` > 0:
    with the EAGLE drafter of ``_eagle_config``, checked by ``_check_eagle_scheduler``.
    ``kv_groups``: the KV cache groups (module docstring; empty: one full-attention group).
    ``spec_method`` "draft_model": a separate draft model drafts instead (``_eagle_config``)."""
    with tempfile.TemporaryDirectory(prefix="frontier-oracle-") as tmp:
        model_dir = Path(tmp)
        (model_dir / "config.json").write_text(json.dumps(_TINY_LLAMA_CONFIG))
        if num_speculative_tokens:
            (model_dir / "draft").mkdir()
            draft = _TINY_EAGLE_DRAFT_CONFIG if spec_method == "eagle" else _TINY_DRAFT_MODEL_CONFIG
            (model_dir / "draft" / "config.json").write_text(json.dumps(draft))
        scheduler = _build_scheduler(model_dir, block_size=block_size,
                                     enable_prefix_caching=enable_prefix_caching,
                                     num_speculative_tokens=num_speculative_tokens,
                                     kv_groups=kv_groups, spec_method=spec_method, **knobs)
    if num_speculative_tokens:
        _check_eagle_scheduler(scheduler, num_speculative_tokens, spec_method)
    block_hasher = None
    if enable_prefix_caching:
        init_none_hash(sha256_cbor)
        # EAGLE with prefix caching hashes each block with the token after it
        # (VllmConfig.num_hash_lookahead_tokens = 1); 0 otherwise.
        block_hasher = get_request_block_hasher(
            block_size, sha256_cbor, scheduler.vllm_config.num_hash_lookahead_tokens
        )
    return scheduler, block_hasher


def add_requests(scheduler: Scheduler, requests: Sequence[RequestLike], block_hasher: Any) -> None:
    """Add ``requests`` in list order, all arriving at t=0, each generating ``output_len``
    tokens (``ignore_eos``); a request with ``lora_id`` > 0 (``RequestSpec.lora_id``) runs adapter
    "lora<id>" (its name is in every block hash's extra keys)."""
    for index, req in enumerate(requests):
        lora_id = getattr(req, "lora_id", 0)
        scheduler.add_request(
            Request(
                request_id=req.request_id,
                prompt_token_ids=_prompt_ids(req, index),
                sampling_params=SamplingParams(
                    max_tokens=req.output_len, ignore_eos=True
                ),
                pooling_params=None,
                arrival_time=0.0,
                priority=req.priority,
                block_hasher=block_hasher,
                lora_request=LoRARequest(f"lora{lora_id}", lora_id, "/nonexistent") if lora_id else None,
            )
        )


def run_vllm_scheduler(
    requests: Sequence[RequestLike],
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    block_size: int,
    num_gpu_blocks: int,
    enable_prefix_caching: bool,
    long_prefill_token_threshold: int = 0,
    policy: str = "fcfs",
    async_scheduling: bool = False,
    watermark: float = 0.0,
    max_steps: int = 200_000,
    pipeline_parallel_size: int = 1,
    kv_groups: tuple[int, ...] = (),
    record_free_blocks: bool = False,
    **scheduler_knobs: Any,
) -> list[dict[str, int]] | tuple[list[dict[str, int]], list[int]]:
    """Run vLLM 0.33's scheduler over ``requests`` (all arrive at t=0, list order).

    Returns one ``{request_id: num_scheduled_tokens}`` per executed step, in
    grant order. ``num_gpu_blocks`` counts block 0 (vLLM's null block).
    ``watermark`` is ``SchedulerConfig.watermark``; ``scheduler_knobs`` are further
    ``SchedulerConfig`` fields (``_build_scheduler``). Raises RuntimeError after
    ``max_steps`` engine steps (e.g. a request that can never fit the KV cache).

    ``kv_groups``: the KV cache groups sharing the pool, in group order, 0 = full
    attention, W > 0 = a sliding window of W tokens (module docstring); empty = one
    full-attention group. ``record_free_blocks``: return ``(trace, free_blocks)``,
    ``free_blocks[i]`` the pool's free blocks (``block_pool.get_num_free_blocks()``,
    evictable cached blocks included) right after the schedule() that produced
    ``trace[i]``.
    """
    scheduler, block_hasher = new_scheduler(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        enable_prefix_caching=enable_prefix_caching,
        long_prefill_token_threshold=long_prefill_token_threshold,
        policy=policy,
        async_scheduling=async_scheduling,
        watermark=watermark,
        pipeline_parallel_size=pipeline_parallel_size,
        kv_groups=kv_groups,
        **scheduler_knobs,
    )
    add_requests(scheduler, requests, block_hasher)
    free_blocks: list[int] | None = [] if record_free_blocks else None
    if async_scheduling or pipeline_parallel_size > 1:   # EngineCore.step_with_batch_queue
        depth = scheduler.vllm_config.max_concurrent_batches
        trace = _run_async(scheduler, max_steps, batch_queue_size=depth, free_blocks=free_blocks)
    else:
        trace = _run_sync(scheduler, max_steps, free_blocks=free_blocks)
    if free_blocks is not None:
        return trace, free_blocks
    return trace


def run_vllm_spec_scheduler(
    requests: Sequence[RequestLike],
    *,
    num_speculative_tokens: int,
    accepted: Callable[[str, int, int], int],
    async_scheduling: bool = False,
    max_steps: int = 200_000,
    kv_groups: tuple[int, ...] = (),
    record_free_blocks: bool = False,
    spec_method: str = "eagle",
    **knobs: Any,
) -> list[dict[str, tuple[int, int]]] | tuple[list[dict[str, tuple[int, int]]], list[int]]:
    """``run_vllm_scheduler`` with EAGLE speculative decoding, ``k = num_speculative_tokens``;
    ``knobs``: its scheduler knobs (``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
    ``block_size``, ``num_gpu_blocks``, ``enable_prefix_caching`` required; threshold, policy,
    watermark and further ``SchedulerConfig`` fields optional).

    Returns one ``{request_id: (num_scheduled_tokens, num_scheduled_spec_tokens)}`` per
    executed step, in grant order; the second item is
    ``len(scheduled_spec_decode_tokens.get(request_id, []))`` (those tokens are part of
    the first). Pipeline parallelism (``pipeline_parallel_size``) only with async scheduling: the
    batch queue of ``max_concurrent_batches`` (pp + 1) and V2's decode stagger.

    ``kv_groups`` and ``record_free_blocks`` as ``run_vllm_scheduler``'s (returns
    ``(trace, free_blocks)`` then). A hybrid KV cache needs a full-attention group (0): the
    draft layer joins the first one, flagged ``is_eagle_group`` (``_kv_cache_config``), as vLLM
    groups gpt-oss + an EAGLE-3 head; checked by ``_check_kv_groups`` and ``_check_eagle_kv_cache``.

    Configuration: method "eagle" on a one-layer EAGLE-Llama draft (``_eagle_config``),
    model runner V2 as on a GPU; verified on the built scheduler
    (``_check_eagle_scheduler``): num_spec_tokens = num_lookahead_tokens = k,
    num_prefill_lookahead 1, no draft slots, can_skip_drafts. With prefix caching, block
    hashes cover the token after each block (``num_hash_lookahead_tokens`` 1).
    ``spec_method`` "draft_model": a separate draft model (a one-layer Llama of the target's
    vocabulary, V2's ``StandaloneARSpeculator``), verified the same way: no prefill lookahead,
    one draft slot per scheduled request, plain hashes (``_check_no_eagle_kv_cache``); the fake
    runner is the same, as the scheduler sees the same drafts.

    Fake model runner V2 (``_EagleRunner``), decided right after each schedule():

    * A request whose step ends before its known tokens (``is_prefill_chunk``, as in the
      one-token driver) samples nothing.
    * Otherwise it samples ``a + 1`` tokens (all ``OUTPUT_TOKEN_ID``), ``a`` the accepted
      drafts. With ``s`` spec tokens scheduled for it and ``r = min(s, real drafts)``:
      ``a = accepted(request_id, context_len, r)`` if ``r > 0``, else 0, where
      ``context_len`` is the scheduler's ``num_computed_tokens`` before the step
      (``num_computed_tokens - num_scheduled_tokens`` after schedule(); a newly admitted
      request starts from its prefix-cache hit; under async scheduling the count is
      optimistic, i.e. it still includes in-flight drafts that may later be rejected).
      ``accepted`` must return 0..r and is called once per such request and step, in
      grant order, at schedule time.
    * Real drafts: after every executed step the runner proposes
      ``K = 0 if out.skip_drafts else out.num_spec_tokens_to_schedule`` drafts for every
      scheduled request (``GPUModelRunner.sample_tokens``); a request admitted in a step
      (new or resumed; V2 re-adds both) has none, so the padding drafts of
      ``pad_spec_decode`` are all rejected, as the GPU rejects draft rows of a step that
      starts inside the prefill (``gather_draft_sampled``). Under async scheduling a
      step scheduled after a ``skip_drafts`` step verifies ``-1`` drafts: ``r = 0``.

    Sync loop (``EngineCore.step`` + ``post_step``)::

        out = schedule(); sampled = runner.execute(out); update_from_output(out, sampled)
        if out.total_num_scheduled_tokens > 0:
            update_draft_token_ids(DraftTokenIds(scheduled ids, [[-1] * K] each))

    (``DraftTokensHandler.get_draft_tokens`` without structured output; the scheduler
    drops them for prefill chunks and finished requests and schedules them next step.)

    Async loop: the one of the module docstring (``_run_async``), with no draft call
    (``post_step`` skips it under async scheduling; ``AsyncScheduler._update_after_schedule``
    gives every sampling request ``num_spec_tokens_to_schedule`` -1 placeholder drafts).
    """
    if knobs.get("pipeline_parallel_size", 1) > 1 and not async_scheduling:
        raise ValueError("run_vllm_spec_scheduler: pipeline parallelism only with async scheduling (vLLM's sync "
                         "engine with PP takes drafts through its batch queue, which this driver does not model)")
    defaults = {"long_prefill_token_threshold": 0, "policy": "fcfs", "watermark": 0.0}
    scheduler, block_hasher = new_scheduler(async_scheduling=async_scheduling, kv_groups=kv_groups,
                                            num_speculative_tokens=num_speculative_tokens, spec_method=spec_method,
                                            **{**defaults, **knobs})
    add_requests(scheduler, requests, block_hasher)
    runner = _EagleRunner(scheduler, accepted)
    free_blocks: list[int] | None = [] if record_free_blocks else None
    if async_scheduling:
        depth = scheduler.vllm_config.max_concurrent_batches
        trace = _run_async(scheduler, max_steps, depth, runner, free_blocks=free_blocks)
    else:
        trace = _run_sync(scheduler, max_steps, runner, free_blocks=free_blocks)
    if free_blocks is not None:
        return trace, free_blocks
    return trace
