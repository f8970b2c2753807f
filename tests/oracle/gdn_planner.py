"""vLLM 0.33's own KV-cache plan of a Gated DeltaNet hybrid (Qwen3.5, Qwen3-Next) on an sm_90 GPU,
run on the CPU: the oracle of ``tests/oracle/test_gdn_kv_capacity_oracle.py``.

``vllm_mamba_plan`` drives vLLM's own code for every step a CPU process can run and reproduces
only what it cannot see (which attention backend and which GDN prefill kernel a Hopper GPU
picks, and the attribute assignments of the two layer constructors):

1. a ``VllmConfig`` from the checkpoint's config.json (vLLM's ``ModelConfig`` reads it through
   transformers' Qwen3.5 / Qwen3-Next config classes); ``VllmConfig.__post_init__`` runs the
   model's ``MODELS_CONFIG_MAP`` hook (Qwen3.5: ``mamba_ssm_dtype`` -> ``mamba_ssm_cache_dtype``)
   and ``HybridAttentionMambaModelConfig`` (``mamba_cache_mode``, ``mamba_block_size``); the
   settings a CPU ``VllmConfig`` decides differently are put back as on CUDA (hybrid KV cache
   manager on, the SSM-state dtype the user's, model runner V2);
2. the layers a rank builds, registered in ``compilation_config.static_forward_context`` as the
   layer constructors do: real ``Attention`` (FLASH_ATTN backend) and
   ``QwenGatedDeltaNetAttention`` instances whose ``__init__`` is skipped, with the attributes the
   spec and alignment code reads;
3. vLLM's ``Platform.update_block_size_for_backend`` unchanged (the CUDA platform does not
   override it): ``_align_hybrid_block_size`` grows the attention block and pads the state page;
4. each pp stage's specs from model runner V2's ``get_kv_cache_spec``, the layout from
   ``resolve_kv_cache_layout``, then ``get_global_kv_cache_groups`` -> ``get_kv_cache_configs``
   -> ``generate_scheduler_kv_cache_config`` -> ``get_kv_cache_capacity``.

CPU mechanics: torchvision is not installed with the oracle, and vLLM's ``qwen3_5.py`` imports
``qwen3_vl.py``, whose transformers processors import torchvision; inert stub modules are served
to those imports only (as ``sglang_driver`` does for SGLang), and vLLM's model registry inspects
the model class in this process instead of a subprocess that would not see them
(``use_in_process_inspection``). Config folders go under CONFIG_ROOT (set it before use).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from import_stubs import StubFinder

os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "1")          # the 0.33 GPU default
CONFIG_ROOT = ""                                                  # set by the test (a tmp folder)


# torchvision is not installed with the oracle, and vLLM's qwen3_5.py imports qwen3_vl.py, which
# imports transformers' Qwen2-VL / Qwen3-VL image and video processors, which import torchvision
# at module level: stub modules are served to those imports only (transformers' own "is
# torchvision available" probes keep seeing it absent); nothing here calls a processor.
_TORCHVISION = StubFinder(("torchvision",), ("transformers.models.qwen2_vl.", "transformers.models.qwen3_vl.",
                                             "transformers.models.qwen3_5", "transformers.video_processing_utils",
                                             "transformers.image_processing_backends", "torchvision"),
                          "__frontier_stub__", nested=True)
try:
    import torchvision  # noqa: F401  (a real one: no stubs)
except ImportError:
    _TORCHVISION.install()
# FlashInfer (the attention backend vLLM picks on Blackwell) is not installed with the oracle
# either: its backend module imports kernel wrappers at module level, which the plan never
# calls; stub modules are served to that module and vLLM's FlashInfer utilities only.
_FLASHINFER = StubFinder(("flashinfer",), ("vllm.v1.attention.backends.flashinfer", "vllm.utils.flashinfer"),
                         "__frontier_stub__", nested=True)
try:
    import flashinfer  # noqa: F401  (a real one: no stubs)
except ImportError:
    _FLASHINFER.install()

import torch  # noqa: E402


@contextlib.contextmanager
def use_in_process_inspection():
    """vLLM inspects a model class in a subprocess (registry._run_in_subprocess), which would not
    see the stubs; inspect it in this process instead (it only imports the module and reads flags)."""
    import vllm.model_executor.models.registry as registry
    saved = registry._run_in_subprocess
    registry._run_in_subprocess = lambda fn: fn()
    try:
        yield
    finally:
        registry._run_in_subprocess = saved


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def load_config(config_name_or_dict: str | dict) -> dict:
    """A config.json dict: a dict as given, or a catalogue name ("Qwen/Qwen3.5-35B-A3B")."""
    if isinstance(config_name_or_dict, dict):
        return config_name_or_dict
    from frontier.model_spec import _catalogue_lookup
    return _catalogue_lookup(str(config_name_or_dict))[0]


def _config_dir(cfg: dict) -> str:
    """A folder holding ``cfg`` as config.json (vLLM's ModelConfig reads a folder), under CONFIG_ROOT."""
    text = json.dumps(cfg, sort_keys=True)
    folder = Path(CONFIG_ROOT) / hashlib.sha1(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "config.json"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return str(folder)


def gdn_prefill_backend_on_cuda(gpu_sm: int, head_k_dim: int, cuda_runtime_major: int = 12,
                                requested: str = "auto") -> str:
    """The GDN prefill kernel ``_resolve_gdn_prefill_backend`` picks on a CUDA GPU
    (vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:243-270, reproduced: the CPU
    platform answers ``is_cuda() == False`` there)."""
    supports_flashinfer = supports_cutedsl = False
    if gpu_sm == 90:
        supports_flashinfer = True
    elif gpu_sm // 10 == 10 and head_k_dim == 128 and cuda_runtime_major >= 13:
        supports_flashinfer = supports_cutedsl = True
    elif gpu_sm // 10 == 12 and head_k_dim == 128 and cuda_runtime_major >= 13:
        supports_flashinfer = True
    if requested in ("flashinfer", "auto") and supports_flashinfer:
        return "flashinfer"
    if requested == "cutedsl" and supports_cutedsl:
        return "cutedsl"
    return "triton"


def _attention_layer(vllm_config, prefix: str, backend):
    """An ``Attention`` as ``Qwen3NextAttention`` builds it (the Qwen3.5 full-attention layer,
    vllm/model_executor/models/qwen3_next.py:280-369), with the attributes
    ``Attention.get_kv_cache_spec`` (model_executor/layers/attention/attention.py:611-682) reads,
    set as ``Attention.__init__`` sets them (attention.py:323-337)."""
    from vllm.model_executor.layers.attention import Attention
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backend import AttentionType

    model_config, cache_config = vllm_config.model_config, vllm_config.cache_config
    text = model_config.hf_text_config
    tp = vllm_config.parallel_config.tensor_parallel_size
    total_kv = text.num_key_value_heads
    assert total_kv % tp == 0 if total_kv >= tp else tp % total_kv == 0   # qwen3_next.py:299-306
    layer = object.__new__(Attention)
    torch.nn.Module.__init__(layer)
    layer.layer_name = prefix
    layer.attn_type = AttentionType.DECODER          # config.is_causal unset (qwen3_next.py:350)
    layer.sliding_window = None
    layer.kv_cache_dtype = cache_config.cache_dtype
    layer.kv_cache_torch_dtype = kv_cache_dtype_str_to_dtype(cache_config.cache_dtype, model_config)
    layer.num_heads = text.num_attention_heads // tp
    layer.num_kv_heads = max(1, total_kv // tp)      # qwen3_next.py:307
    layer.head_size = text.head_dim                  # qwen3_next.py:308
    layer.head_size_v = layer.head_size
    layer.kv_sharing_target_layer_name = None
    layer.attn_backend = backend
    assert layer.num_kv_heads == model_config.get_num_kv_heads(vllm_config.parallel_config)
    return layer


def _gdn_layer(vllm_config, prefix: str, gdn_prefill_backend: str):
    """A ``QwenGatedDeltaNetAttention`` with the attributes its ``get_state_shape`` /
    ``get_state_dtype`` / ``get_kv_cache_spec`` / ``get_prefill_checkpoint_alignment`` read, set
    as its constructors set them (mamba/gdn/base.py:32-47, qwen_gdn_linear_attn.py:566-575,
    686-702)."""
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
        FLASHINFER_GDN_CHECKPOINT_ALIGNMENT,
        QwenGatedDeltaNetAttention,
    )

    text = vllm_config.model_config.hf_text_config
    layer = object.__new__(QwenGatedDeltaNetAttention)
    torch.nn.Module.__init__(layer)
    layer.prefix = prefix
    layer.tp_size = vllm_config.parallel_config.tensor_parallel_size
    layer.model_config = vllm_config.model_config
    layer.cache_config = vllm_config.cache_config
    layer.quant_config = None
    layer.speculative_config = vllm_config.speculative_config
    layer.num_spec = (vllm_config.speculative_config.num_speculative_tokens
                      if vllm_config.speculative_config else 0)
    layer.num_k_heads = text.linear_num_key_heads
    layer.num_v_heads = text.linear_num_value_heads
    layer.head_k_dim = text.linear_key_head_dim
    layer.head_v_dim = text.linear_value_head_dim
    layer.conv_kernel_size = text.linear_conv_kernel_dim
    layer.key_dim = layer.head_k_dim * layer.num_k_heads
    layer.value_dim = layer.head_v_dim * layer.num_v_heads
    layer.gdn_prefill_backend = gdn_prefill_backend
    layer.vllm_config = vllm_config
    layer._checkpoint_alignment = (
        FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
        if vllm_config.cache_config.mamba_cache_mode == "align" and gdn_prefill_backend == "flashinfer"
        else None
    )
    return layer


def _mamba2_layer(vllm_config, prefix: str):
    """A ``MambaMixer2`` as ``NemotronHMambaDecoderLayer`` builds it (nemotron_h.py), with the
    attributes its ``get_state_shape`` / ``get_state_dtype`` / ``get_kv_cache_spec`` read, set as
    its constructor sets them (mamba_mixer2.py:313-555); its state shape reads the TP size from the
    distributed state, patched by ``_tp_world``."""
    from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2

    text = vllm_config.model_config.hf_text_config
    layer = object.__new__(MambaMixer2)
    torch.nn.Module.__init__(layer)
    layer.prefix = prefix
    layer.tp_size = vllm_config.parallel_config.tensor_parallel_size
    layer.model_config = vllm_config.model_config
    layer.cache_config = vllm_config.cache_config
    layer.ssm_state_size = text.ssm_state_size
    layer.conv_kernel_size = text.conv_kernel
    layer.intermediate_size = text.mamba_num_heads * text.mamba_head_dim
    layer.head_dim = text.mamba_head_dim
    layer.num_heads = text.mamba_num_heads
    layer.n_groups = text.n_groups
    layer.use_replayssm = False
    layer.num_spec = vllm_config.num_speculative_tokens
    return layer


@contextlib.contextmanager
def _tp_world(tp: int):
    import vllm.model_executor.layers.mamba.mamba_mixer2 as m2

    saved = m2.get_tensor_model_parallel_world_size
    m2.get_tensor_model_parallel_world_size = lambda: tp
    try:
        yield
    finally:
        m2.get_tensor_model_parallel_world_size = saved


def layer_kinds(text) -> list[str | None]:
    """Each layer's cache kind: Qwen3.5's ``layer_types`` ("linear_attention" / "full_attention"),
    or Nemotron-H's ``hybrid_override_pattern`` ("mamba2" for M, "full_attention" for *, None for
    its MLP / MoE blocks, which hold no cache)."""
    pattern = getattr(text, "hybrid_override_pattern", None)
    if pattern:
        return [{"M": "mamba2", "*": "full_attention"}.get(c) for c in pattern]
    return list(text.layer_types)


def stage_layer_indices(num_layers: int, pp: int) -> list[range]:
    """Layers of each pp stage, from vLLM's get_pp_indices (vllm/distributed/utils.py:198)."""
    from vllm.distributed.utils import get_pp_indices

    return [range(*get_pp_indices(num_layers, rank, pp)) for rank in range(pp)]


@contextlib.contextmanager
def _forward_context(vllm_config, layers: dict):
    ctx = vllm_config.compilation_config.static_forward_context
    saved = dict(ctx)
    ctx.clear()
    ctx.update(layers)
    try:
        yield
    finally:
        ctx.clear()
        ctx.update(saved)


@contextlib.contextmanager
def _flashinfer_on_blackwell():
    """FlashInfer's backend module as on an SM100-family GPU with its TRT-LLM kernels (what
    ``FlashInferBackend.get_supported_kernel_block_sizes`` asks: the page sizes from 128 up that
    only trtllm-gen serves are advertised there, beside 16, 32 and 64)."""
    import vllm.v1.attention.backends.flashinfer as fi

    platform, trtllm = fi.current_platform, fi.can_use_trtllm_attention
    family = platform.is_device_capability_family
    platform.is_device_capability_family = lambda capability, *a, **k: capability == 100
    fi.can_use_trtllm_attention = lambda num_qo_heads, num_kv_heads, *a, **k: num_qo_heads % num_kv_heads == 0
    try:
        yield
    finally:
        platform.is_device_capability_family = family
        fi.can_use_trtllm_attention = trtllm


def _spec_kind(spec) -> str:
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    if isinstance(spec, MambaSpec):
        return "mamba"
    if isinstance(spec, FullAttentionSpec):
        return "full_attention"
    return type(spec).__name__


# ---------------------------------------------------------------------------------------------
# the oracle
# ---------------------------------------------------------------------------------------------
def build_vllm_config(cfg: dict, tp: int, pp: int, max_model_len: int, max_num_batched_tokens: int,
                      prefix_caching: bool, kv_cache_dtype: str = "auto", user_block_size: int | None = None,
                      mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
                      max_num_seqs: int = 256, num_speculative_tokens: int = 0):
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    model_config = ModelConfig(model=_config_dir(cfg), skip_tokenizer_init=True, dtype="auto",
                               max_model_len=max_model_len)
    cache_kwargs = dict(enable_prefix_caching=prefix_caching, cache_dtype=kv_cache_dtype,
                        mamba_cache_dtype=mamba_cache_dtype, mamba_ssm_cache_dtype=mamba_ssm_cache_dtype)
    if user_block_size is not None:
        cache_kwargs["block_size"] = user_block_size
    speculative_config = None
    if num_speculative_tokens:      # the checkpoint's MTP layers (vLLM resolves method "mtp" to qwen3_5_mtp)
        from vllm.config import SpeculativeConfig

        speculative_config = SpeculativeConfig(
            method="mtp", num_speculative_tokens=num_speculative_tokens, target_model_config=model_config,
            target_parallel_config=ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp))
    config = VllmConfig(
        speculative_config=speculative_config,
        model_config=model_config,
        scheduler_config=SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False,
                                         max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                         enable_chunked_prefill=True),
        cache_config=CacheConfig(**cache_kwargs), device_config=DeviceConfig("cpu"),
        parallel_config=ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp))
    assert config.use_v2_model_runner
    assert model_config.is_hybrid, "not a hybrid attention/mamba model"
    # As on CUDA: Platform.support_hybrid_kv_cache() is True there (config/vllm.py:2232-2294).
    config.scheduler_config.disable_hybrid_kv_cache_manager = False
    # As on CUDA: the SSM-state dtype is the user's value, updated only by the model's own hook
    # (Qwen3.5: model_executor/models/config.py:953-977); the CPU platform may force float32.
    config.cache_config.mamba_ssm_cache_dtype = mamba_ssm_cache_dtype
    hook = MODELS_CONFIG_MAP.get(model_config.architecture)
    if hook is not None:
        hook.verify_and_update_config(config)
    assert config.cache_config.kv_cache_layout is None
    return config


def vllm_mamba_plan(config_name_or_dict: str | dict, tp: int, pp: int, available_bytes: int, max_model_len: int,
                    max_num_batched_tokens: int, prefix_caching: bool, kv_cache_dtype: str = "auto",
                    user_block_size: int | None = None, *, gpu_sm: int = 90, gdn_prefill_backend: str = "auto",
                    mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
                    num_speculative_tokens: int = 0, cuda_runtime_major: int = 13) -> dict[str, Any]:
    """vLLM 0.33's KV-cache plan for one deployment of a Qwen3.5 / Qwen3-Next model.

    ``available_bytes``: what ``determine_available_memory`` returns per rank (the same for every
    rank). ``num_speculative_tokens`` > 0: the checkpoint's MTP drafter (``--speculative-config``
    method "mtp"): its full-attention layers (``Qwen3_5MultiTokenPredictor``, prefix
    ``mtp.layers.i``, built as the target's full-attention layers) join the last pp stage, and
    the GDN specs hold that many speculative blocks. ``gpu_sm``: 90 (Hopper), the SM100 family
    (100 / 103: Blackwell) or 120 (RTX PRO 6000); ``cuda_runtime_major``: the build's CUDA (vLLM 0.33's PyPI wheel is a
    CUDA 13 build: it requires nvidia-cutlass-dsl[cu13]), which decides Blackwell's GDN prefill
    kernel. Returns the aligned block sizes, page sizes, groups, num_blocks and the logged
    capacity; raises vLLM's ValueError where vLLM would refuse to start.
    """
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend

    # The attention backend vLLM's CUDA platform picks for Qwen3.5's full-attention layers (head
    # size 256, bf16, causal; platforms/cuda.py _get_backend_priorities): FLASH_ATTN on Hopper (FA3)
    # and on the SM120 family (FA2: its kernel blocks are multiples of 16 there too; FA4's hd256
    # block is for capabilities 10 / 11 only), FLASHINFER first on the SM100 family (Blackwell:
    # B200 / B300 / GB200 / GB300)
    if gpu_sm == 90 or gpu_sm // 10 == 12:
        backend, device = FlashAttentionBackend, contextlib.nullcontext()
    elif gpu_sm // 10 == 10:
        backend, device = FlashInferBackend, _flashinfer_on_blackwell()
    else:
        raise NotImplementedError("only SM90, the SM100 family (FLASHINFER) and SM120 (FLASH_ATTN) are modelled")
    cfg = load_config(config_name_or_dict)
    config = build_vllm_config(cfg, tp, pp, max_model_len, max_num_batched_tokens, prefix_caching,
                               kv_cache_dtype, user_block_size, mamba_cache_dtype, mamba_ssm_cache_dtype,
                               num_speculative_tokens=num_speculative_tokens)
    with device, _tp_world(tp):
        return _plan(cfg, config, backend, tp, pp, available_bytes, prefix_caching, kv_cache_dtype, user_block_size,
                     gpu_sm, gdn_prefill_backend, num_speculative_tokens, cuda_runtime_major)


def _plan(cfg, config, backend, tp, pp, available_bytes, prefix_caching, kv_cache_dtype, user_block_size,
          gpu_sm, gdn_prefill_backend, num_speculative_tokens, cuda_runtime_major) -> dict[str, Any]:
    """``vllm_mamba_plan`` once the config and the attention backend are chosen."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.attention.selector import get_mamba_attn_backend
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config, get_kv_cache_capacity
    from vllm.v1.kv_cache_interface import MambaSpec
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    cache_config = config.cache_config
    text = config.model_config.hf_text_config
    layer_types = layer_kinds(text)
    num_layers = text.num_hidden_layers
    assert len(layer_types) == num_layers
    prefill_backend = gdn_prefill_backend_on_cuda(gpu_sm, getattr(text, "linear_key_head_dim", 0), cuda_runtime_major,
                                                  requested=gdn_prefill_backend)
    # Layer names as the checkpoint's module tree registers them (not used by the numbers).
    root = "language_model.model.layers" if hasattr(config.model_config.hf_config, "text_config") else "model.layers"

    def stage_layers(indices) -> dict:
        layers = {}
        for i in indices:
            if layer_types[i] == "linear_attention":
                name = f"{root}.{i}.linear_attn"
                layers[name] = _gdn_layer(config, name, prefill_backend)
            elif layer_types[i] == "full_attention":
                name = f"{root}.{i}.self_attn.attn"
                layers[name] = _attention_layer(config, name, backend)
            elif layer_types[i] == "mamba2":
                name = f"{root}.{i}.mixer"
                layers[name] = _mamba2_layer(config, name)
            elif layer_types[i] is None:
                continue
            else:
                raise ValueError(f"layer {i}: unknown layer type {layer_types[i]!r}")
        if num_speculative_tokens and indices.stop == num_layers:      # the drafter runs on the last stage
            for j in range(getattr(text, "mtp_num_hidden_layers", 1)):
                name = f"mtp.layers.{j}.self_attn.attn"
                layers[name] = _attention_layer(config, name, backend)
        return layers

    stages = stage_layer_indices(num_layers, pp)
    block_size_before = cache_config.block_size
    # Each worker runs update_block_size_for_backend after load_model on its own stage's layers
    # and its own copy of the config (v1/executor/multiproc_executor.py:802); every stage must
    # reach the same sizes (the engine core keeps one block_size).
    fields = ("block_size", "mamba_block_size", "mamba_page_size_padded")
    before = {f: getattr(cache_config, f) for f in fields}
    outcomes = set()
    for indices in stages:
        for f, v in before.items():
            setattr(cache_config, f, v)
        with _forward_context(config, stage_layers(indices)):
            Platform.update_block_size_for_backend(config)
        outcomes.add(tuple(getattr(cache_config, f) for f in fields))
    assert len(outcomes) == 1, outcomes

    specs: list[dict] = []
    for indices in stages:
        with _forward_context(config, stage_layers(indices)):
            specs.append(get_kv_cache_spec(config))

    all_specs = [s for stage in specs for s in stage.values()]
    layout = resolve_kv_cache_layout(
        config, [[m.name for m in get_supported_kv_cache_layouts(
            [backend, get_mamba_attn_backend(text_mamba_type(all_specs))])]], all_specs)

    groups = get_global_kv_cache_groups(config, specs)
    configs = get_kv_cache_configs(config, specs, [available_bytes] * len(specs), groups)
    scheduler = generate_scheduler_kv_cache_config(configs)
    tokens, concurrency = get_kv_cache_capacity(config, scheduler)

    mamba = next(s for s in all_specs if isinstance(s, MambaSpec))
    attn = next(s for s in all_specs if not isinstance(s, MambaSpec))
    model_cls, _ = ModelRegistry.resolve_model_cls(config.model_config.architecture,
                                                   model_config=config.model_config)
    group_rows = []
    for g in scheduler.kv_cache_groups:
        spec = g.kv_cache_spec
        group_rows.append({
            "kind": _spec_kind(spec), "layers": len(g.layer_names), "block_size": spec.block_size,
            "page_bytes": spec.page_size_bytes,
            "blocks_per_request": -(-spec.max_memory_usage_bytes(config) // spec.page_size_bytes),
        })
    bytes_per_block = max(configs_layer_pages(configs[0]))
    return {
        "model": cfg.get("architectures", ["?"])[0], "tp": tp, "pp": pp, "prefix_caching": prefix_caching,
        "kv_cache_dtype": kv_cache_dtype, "user_block_size": user_block_size,
        "stage_layers": [len(r) for r in stages],
        "default_block_size": block_size_before,
        "block_size": cache_config.block_size,              # attention (scheduler) block size
        "mamba_cache_mode": cache_config.mamba_cache_mode,
        "mamba_block_size": cache_config.mamba_block_size,
        "gdn_prefill_backend": prefill_backend,
        "mamba_shapes": [tuple(s) for s in mamba.shapes], "mamba_dtypes": [str(d) for d in mamba.dtypes],
        "mamba_num_prefill_checkpoint_blocks": mamba.num_prefill_checkpoint_blocks,
        "mamba_num_speculative_blocks": mamba.num_speculative_blocks,
        "mamba_page_bytes_real": mamba.real_page_size_bytes,
        "mamba_page_bytes_padded": mamba.page_size_bytes,
        "mamba_page_size_padded_cfg": cache_config.mamba_page_size_padded,
        "mamba_page_from_model_cls": MambaSpec(
            shapes=model_cls.get_mamba_state_shape_from_config(config),
            dtypes=model_cls.get_mamba_state_dtype_from_config(config), block_size=-1).page_size_bytes,
        "attn_kv_heads_per_rank": attn.num_kv_heads, "attn_head_size": attn.head_size,
        "attn_dtype": str(attn.dtype), "attn_page_bytes": attn.page_size_bytes,
        "attn_block_stride_alignment": attn.block_stride_alignment,
        "kv_cache_layout": layout.name,
        "groups": group_rows,
        "bytes_per_block": bytes_per_block,
        "num_blocks": scheduler.num_blocks,
        "blocks_per_request": sum(r["blocks_per_request"] for r in group_rows),
        "logged_tokens": tokens,
        "max_concurrency": concurrency,
        "max_model_len": config.model_config.max_model_len,
    }


def text_mamba_type(specs):
    from vllm.v1.kv_cache_interface import MambaSpec

    return next(s.mamba_type for s in specs if isinstance(s, MambaSpec))


def configs_layer_pages(kv_cache_config) -> list[int]:
    """Bytes of one block summed over the layers of each group (the pool's bytes per block is
    the largest group's; kv_cache_planning.py:574-605)."""
    from vllm.v1.core.kv_cache_planning import _get_per_layer_spec

    return [sum(_get_per_layer_spec(g, n).page_size_bytes for n in g.layer_names)
            for g in kv_cache_config.kv_cache_groups]
