"""Tiny model configs (written as config.json under tmp_path) and fast timing for CPU tests."""

import json

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # CI boxes are small and shared: 2-thread OpenMP regions stall under load

DENSE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
         "max_position_embeddings": 512, "tie_word_embeddings": False}
MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32, "num_local_experts": 8,
       "num_experts_per_tok": 2, "vocab_size": 256, "max_position_embeddings": 512}


def _write(tmp_path, name, cfg):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder / "config.json")


@pytest.fixture
def dense_config(tmp_path):
    return _write(tmp_path, "tiny-llama", DENSE)


@pytest.fixture
def moe_config(tmp_path):
    return _write(tmp_path, "tiny-mixtral", MOE)


@pytest.fixture
def fast_timing():
    from profiler.timing import TimingConfig
    return TimingConfig(warmup_s=0.0, budget_s=0.001, min_reps=3, max_reps=10)
