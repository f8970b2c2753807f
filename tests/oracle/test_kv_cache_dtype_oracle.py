"""--kv-cache-dtype auto against vLLM 0.33's own resolution, for every catalogue checkpoint that
carries a quantization config: vLLM normalizes the config (a modelopt ``hf_quant_config.json``
gets quant_method "modelopt"; ``ModelArchConfigConvertorBase._normalize_quantization_config``),
resolves "auto" (``resolve_kv_cache_dtype_string``), and the attention layer turns a
compressed-tensors ``kv_cache_scheme`` left at "auto" into fp8 (``Attention.__init__``). Our side:
the KV bytes per element that ``load_model_spec`` parses and ``EngineArgs.resolve`` keeps."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from frontier.model_spec import _catalogue_files, _catalogue_lookup, load_model_spec
from simulator.engine_args import EngineArgs
from simulator.simulation import resolve_engine

pytestmark = pytest.mark.oracle


def _quantized_catalogue() -> list[tuple[str, dict]]:
    """(name, the quantization config vLLM reads) of every loadable catalogue model that has one."""
    out = []
    for name in sorted(_catalogue_files()):
        config, hf_quant = _catalogue_lookup(name)
        quant = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config") \
            or hf_quant
        if not quant:
            continue
        if quant is hf_quant and "producer" not in quant:
            # AIConfigurator's copies of some ModelOpt hf_quant_config.json files (Nemotron 3 Super) drop
            # the producer block NVIDIA's checkpoints carry, which vLLM reads to know them as ModelOpt's
            quant = {"producer": {"name": "modelopt"}, **quant}
        try:
            load_model_spec(name)
        except ValueError:          # an architecture the simulator does not model
            continue
        out.append((name, quant))
    return out


def _vllm_auto_bytes(quant: dict) -> float:
    import vllm.config  # noqa: F401  (imported first: the convertor module imports it back)
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    hf_config = SimpleNamespace(quantization_config=copy.deepcopy(quant))
    normalized = ModelArchConfigConvertorBase._normalize_quantization_config(None, hf_config)
    dtype = resolve_kv_cache_dtype_string("auto", SimpleNamespace(hf_config=SimpleNamespace(
        quantization_config=normalized)))
    if dtype == "auto" and normalized.get("kv_cache_scheme") is not None:     # the attention layer's rule
        dtype = "fp8"
    return 1.0 if dtype.startswith("fp8") else 2.0


def test_auto_kv_dtype_of_every_quantized_catalogue_checkpoint_is_vllms():
    cases = _quantized_catalogue()
    assert len(cases) >= 20
    kinds = set()
    for name, quant in cases:
        # (prefix caching off: Nemotron-H's Mamba2 blocks are simulated without it; the dtype does not depend on it)
        ours = resolve_engine(EngineArgs(model=name, max_model_len=4096, enable_prefix_caching=False)
                              ).model.quant.kv_bytes_per_elem
        assert ours == _vllm_auto_bytes(quant), name
        kinds.add(ours)
    assert kinds == {1.0, 2.0}      # both outcomes are exercised


def test_an_explicit_value_is_kept_by_vllm():
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    model_config = SimpleNamespace(hf_config=SimpleNamespace(quantization_config={
        "quant_method": "modelopt", "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}))
    assert resolve_kv_cache_dtype_string("bfloat16", model_config) == "bfloat16"
    assert resolve_kv_cache_dtype_string("auto", model_config) == "fp8_e4m3"   # 1 byte, as our "fp8"
