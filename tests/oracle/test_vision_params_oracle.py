"""A multimodal checkpoint's vision tower: our parameter count (``ModelSpec``'s
``vision_params_sharded + vision_params_replicated``) against transformers' own modules built from
the same config (on the meta device: shapes only): Qwen3.5's ViT, and Gemma 3's SigLIP encoder with
its multimodal projector (the modules vLLM builds for them), for every such model in the catalogue."""

from __future__ import annotations

import pytest

from frontier.model_spec import _catalogue_lookup, load_model_spec

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("name", ["Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-122B-A10B",
                                  "Qwen/Qwen3.5-397B-A17B"])
def test_qwen3_5_vision_tower_params_equal_transformers(name):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_5_moe import configuration_qwen3_5_moe as C
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as M

    config, _ = _catalogue_lookup(name)
    with torch.device("meta"):
        tower = M.Qwen3_5MoeVisionModel(C.Qwen3_5MoeVisionConfig(**config["vision_config"]))
    want = sum(p.numel() for p in tower.parameters())
    m = load_model_spec(name)
    assert m.vision_params_sharded + m.vision_params_replicated == want


@pytest.mark.parametrize("name", ["google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it"])
def test_gemma3_vision_tower_params_equal_transformers(name):
    torch = pytest.importorskip("torch")
    from transformers import Gemma3Config
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector
    from transformers.models.siglip.modeling_siglip import SiglipVisionModel

    config, _ = _catalogue_lookup(name)
    c = Gemma3Config(**config)
    with torch.device("meta"):
        modules = (SiglipVisionModel(c.vision_config), Gemma3MultiModalProjector(c))
    want = sum(p.numel() for module in modules for p in module.parameters())
    m = load_model_spec(name)
    assert m.vision_params_sharded + m.vision_params_replicated == want
