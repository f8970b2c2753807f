"""Nemotron-H's weights: our parameter count (``ModelSpec.weight_bytes_per_rank`` at TP 1 over the
bf16 bytes a parameter) against transformers' own NemotronH modules built from the same config (on
the meta device: shapes only), for every Nemotron-H checkpoint the simulator takes."""

from __future__ import annotations

import dataclasses

import pytest

from frontier.model_spec import _catalogue_lookup, load_model_spec
from frontier.parallel import ParallelSpec
from frontier.quant import QuantSpec

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("name", ["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/Nemotron-H-56B-Base-8K",
                                  "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"])
def test_nemotron_h_params_equal_transformers(name):
    """(Nemotron 3 Super: its latent MoE; counted in bf16, its FP8 scheme aside.)"""
    torch = pytest.importorskip("torch")
    from transformers.models.nemotron_h import configuration_nemotron_h as C
    from transformers.models.nemotron_h import modeling_nemotron_h as M

    config, _ = _catalogue_lookup(name)
    fields = {k: v for k, v in config.items() if k not in ("auto_map", "quantization_config")}
    with torch.device("meta"):
        model = M.NemotronHForCausalLM(C.NemotronHConfig(**fields))
    want = sum(p.numel() for p in model.parameters())
    bf16 = dataclasses.replace(load_model_spec(name), quant=QuantSpec())
    assert bf16.weight_bytes_per_rank(ParallelSpec(tp=1)) == 2 * want
