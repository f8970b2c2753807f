"""GPU path (skipped without CUDA): graph-replay kernel timing, cold L2, memory columns filled."""

import pytest
import torch

from frontier.profile_schema import read_profiles
from profiler.cli_entry import ProfileArgs, run_profile

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_tiny_sweep_on_cuda_uses_graph_replay_and_fills_memory(dense_config, tmp_path):
    args = ProfileArgs(model=dense_config, out=tmp_path, tensor_parallel_size="1,2", device="cuda",
                       families="linear,attention,memory", warmup_ms=1, budget_ms=5)
    run_profile(args)
    gpu = next(p.name.split("=", 1)[1] for p in (tmp_path / "family=linear").iterdir())
    linear = read_profiles(tmp_path, "linear", gpu)
    kernel = linear[linear["timing_mode"] == "kernel"]
    assert kernel["kernel_source"].str.contains(r"\[cuda_graph_replay_x\d+\+cold_l2\]").all()
    attention = read_profiles(tmp_path, "attention", gpu)
    assert attention["kernel_source"].str.contains("cuda_graph_replay|eager_wall_sync").all()
    memory = read_profiles(tmp_path, "memory", gpu)
    assert (memory["torch_peak_increase_bytes"] > 0).all() and memory["non_torch_bytes"].notna().all()
