"""`GpuSpec`: one accelerator's capacity, speeds and price, from frontier/catalogue/gpus.json.

Every catalogue entry carries a `source` string (datasheet / aiconfigurator systems yaml /
price source). Conventions: FLOP/s are dense tensor-core peaks (no 2:4 sparsity), except
`fp32_flops`, the non-tensor (CUDA-core) FP32 peak;
bandwidths are bytes/s per GPU, one direction; `memory_bytes` is the total nvidia-smi
reports (e.g. H100 SXM 81559 MiB), not the marketing size. GPUs without NVLink list
their PCIe peer bandwidth as `nvlink_bw_bytes_per_s`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type. Units: bytes, bytes/s, FLOP/s, USD/hour; sm_version e.g. 90 for sm_90."""

    name: str
    memory_bytes: int
    hbm_bw_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float  # 0 when the GPU has no FP8 tensor cores
    fp4_flops: float  # 0 when the GPU has no FP4 tensor cores
    fp32_flops: float  # non-tensor FP32 peak (CUDA cores): fp32 GEMMs such as MiniMax-M2's router
    nvlink_bw_bytes_per_s: float  # per GPU, one direction
    network_bw_bytes_per_s: float  # per GPU NIC, one direction (400 Gb/s = 50e9)
    gpus_per_node: int
    price_per_hour_usd: float
    sm_version: int
    source: str
    host_bw_bytes_per_s: float = 0.0  # per GPU host link (PCIe), one direction; 0 = unknown (copies not priced)

    def __post_init__(self) -> None:
        for f in ("memory_bytes", "hbm_bw_bytes_per_s", "bf16_flops", "fp32_flops", "nvlink_bw_bytes_per_s",
                  "network_bw_bytes_per_s", "gpus_per_node", "sm_version"):
            if not getattr(self, f) > 0:
                raise ValueError(f"GpuSpec {self.name}: {f}={getattr(self, f)} must be > 0")
        for f in ("fp8_flops", "fp4_flops", "price_per_hour_usd", "host_bw_bytes_per_s"):
            if getattr(self, f) < 0:
                raise ValueError(f"GpuSpec {self.name}: {f}={getattr(self, f)} must be >= 0")


# PCIe 5.0 x16 is 64 GB/s per direction; every NVLink GPU in the catalogue has >= 200 GB/s.
PCIE_MAX_BW_BYTES_PER_S = 64e9


def intra_node_link(gpu: GpuSpec) -> str:
    """"pcie" for GPUs whose peer bandwidth is PCIe-class (L40S, L4, H100-PCIe, RTX PRO 6000),
    else "nvlink": the link class of collectives inside a node, for the simulator's comm models
    and for the measured collective rows the AIConfigurator importer writes."""
    return "pcie" if gpu.nvlink_bw_bytes_per_s <= PCIE_MAX_BW_BYTES_PER_S else "nvlink"


def is_sm100_family(sm_version: int) -> bool:
    """vLLM's ``is_device_capability_family(100)``: datacenter Blackwell, sm_100..sm_109
    (B200, GB200, B300), which several of its defaults and kernel choices single out."""
    return sm_version // 10 == 10


def _key(name: str) -> str:
    """Alias key: lower case, 'nvidia' dropped, only letters and digits ("H100-SXM" -> "h100sxm")."""
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", ""))


def _entries() -> list[dict[str, Any]]:
    text = resources.files("frontier").joinpath("catalogue/gpus.json").read_text()
    return json.loads(text)["gpus"]


def _parse(entry: dict[str, Any]) -> tuple[GpuSpec, list[str]]:
    fields = dict(entry)
    aliases = fields.pop("aliases", [])
    try:
        return GpuSpec(**fields), aliases
    except TypeError as exc:  # unknown or missing keys
        raise ValueError(f"bad gpus.json entry {entry.get('name')!r}: {exc}") from None


def list_gpus() -> list[str]:
    """Canonical names of the catalogue GPUs."""
    return [e["name"] for e in _entries()]


def get_gpu(name: str) -> GpuSpec:
    """GpuSpec by name or alias, case- and punctuation-insensitive ("H100", "h100_sxm", "NVIDIA H100 80GB HBM3")."""
    wanted = _key(name)
    for entry in _entries():
        spec, aliases = _parse(entry)
        if wanted in {_key(spec.name), *(_key(a) for a in aliases)}:
            return spec
    raise ValueError(f"unknown GPU {name!r}; valid: {', '.join(list_gpus())}")
