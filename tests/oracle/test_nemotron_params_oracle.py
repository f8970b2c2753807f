"""Nemotron-H's weights: our parameter count (``ModelSpec.weight_bytes_per_rank`` at TP 1 over the
bf16 bytes a parameter) against transformers' own NemotronH modules built from the same config (on
the meta device: shapes only), for every Nemotron-H checkpoint the simulator takes."""

from __future__ import annotations

import pytest

from frontier.model_spec import _catalogue_lookup, load_model_spec
from frontier.parallel import ParallelSpec

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("name", ["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/Nemotron-H-56B-Base-8K"])
def test_nemotron_h_params_equal_transformers(name):
    torch = pytest.importorskip("torch")
    from transformers.models.nemotron_h import configuration_nemotron_h as C
    from transformers.models.nemotron_h import modeling_nemotron_h as M

    config, _ = _catalogue_lookup(name)
    with torch.device("meta"):
        model = M.NemotronHForCausalLM(C.NemotronHConfig(**{k: v for k, v in config.items() if k != "auto_map"}))
    want = sum(p.numel() for p in model.parameters())
    assert load_model_spec(name).weight_bytes_per_rank(ParallelSpec(tp=1)) == 2 * want
