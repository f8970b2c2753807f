"""A multimodal checkpoint's vision tower: our parameter count (``ModelSpec``'s
``vision_params_sharded + vision_params_replicated``) against transformers' own modules built from
the same config (on the meta device: shapes only): Qwen3-VL's and Qwen3.5's ViT, Gemma 3's SigLIP
encoder with its multimodal projector and Kimi-K2.5's MoonViT with its projector (the modules vLLM
builds for them), for every such model in the catalogue."""

from __future__ import annotations

import pytest

from frontier.model_spec import _catalogue_lookup, load_model_spec

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("name", ["Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-122B-A10B",
                                  "Qwen/Qwen3.5-397B-A17B", "nvidia/Qwen3.5-397B-A17B-NVFP4",
                                  "nvidia/Qwen3.5-122B-A10B-NVFP4", "nvidia/Qwen3.6-27B-NVFP4",
                                  "nvidia/Qwen3.6-35B-A3B-NVFP4"])
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


@pytest.mark.parametrize("name", ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
                                  "Qwen/Qwen3-VL-32B-Instruct", "Qwen/Qwen3-VL-32B-Thinking",
                                  "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Instruct"])
def test_qwen3_vl_vision_tower_params_equal_transformers(name):
    """Qwen3-VL's ViT, with its three deepstack mergers."""
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_vl import configuration_qwen3_vl as C
    from transformers.models.qwen3_vl import modeling_qwen3_vl as M

    config, _ = _catalogue_lookup(name)
    assert config["vision_config"]["deepstack_visual_indexes"]
    with torch.device("meta"):
        tower = M.Qwen3VLVisionModel(C.Qwen3VLVisionConfig(**config["vision_config"]))
    want = sum(p.numel() for p in tower.parameters())
    m = load_model_spec(name)
    assert m.vision_params_sharded + m.vision_params_replicated == want


@pytest.mark.parametrize("name", ["moonshotai/Kimi-K2.5", "nvidia/Kimi-K2.5-NVFP4", "nvidia/Kimi-K2.6-NVFP4",
                                  "nvidia/Kimi-K2.7-Code-NVFP4"])
def test_kimi_k25_vision_tower_params_equal_transformers(name):
    """MoonViT and its patch-merger projector, built as vLLM 0.33 builds them: from transformers'
    own Kimi_K25Config (the hub's old-schema vision keys are not its fields; its defaults apply)."""
    torch = pytest.importorskip("torch")
    from transformers.models.kimi_k25 import configuration_kimi_k25 as C
    from transformers.models.kimi_k25 import modeling_kimi_k25 as M

    config, _ = _catalogue_lookup(name)
    c = C.Kimi_K25Config(text_config={"hidden_size": config["text_config"]["hidden_size"]},
                         vision_config={k: v for k, v in config["vision_config"].items()
                                        if k in C.Kimi_K25VisionConfig.__dataclass_fields__})
    with torch.device("meta"):
        modules = (M.Kimi_K25VisionModel(c.vision_config), M.Kimi_K25MultimodalProjection(c))
    want = sum(p.numel() for module in modules for p in module.parameters())
    m = load_model_spec(name)
    assert m.vision_params_sharded + m.vision_params_replicated == want
    assert m.vision_num_heads == c.vision_config.num_attention_heads == 16


def test_qwen_image_resize_equals_transformers():
    # the placeholder count of an image (frontier.vision) rests on transformers' smart_resize
    # (vLLM's Qwen3-VL processing info calls it with the tower's factor and the hub's pixel bounds)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as theirs

    from frontier.vision import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS, smart_resize
    sizes = [(h, w) for h in (17, 100, 256, 333, 720, 1080, 2000, 4000, 9000) for w in (31, 256, 640, 1280, 1920, 7000)
             if max(h, w) / min(h, w) <= 200]
    for h, w in sizes:
        assert smart_resize(h, w, 32, QWEN_MIN_PIXELS, QWEN_MAX_PIXELS) == theirs(h, w, 32, QWEN_MIN_PIXELS,
                                                                                QWEN_MAX_PIXELS), (h, w)
