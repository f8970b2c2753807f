"""Profiler: the only torch/CUDA code (issue 4)."""
