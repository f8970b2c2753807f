"""Calibrated collectives: log-log interpolation of measured single-node tables, with the
analytical backend outside them (counted in `fallbacks`).

Tables come from the profile schema (family "comm", one GPU), as the AIConfigurator importer
writes them: vLLM's custom all-reduce (backend "vllm_graph", CUDA-graph replays) and
nccl-tests rows (all_reduce, all_gather, reduce_scatter, all_to_all) for 2/4/8 GPUs of one
node. One curve per (implementation, kind, group size): latency vs message bytes, 2-byte
dtype rows (fp16/bf16) preferred, repeated measurements of one size reduced to their median.
Between two measured sizes the latency is interpolated linearly in (log bytes, log seconds);
a measured size returns the measured latency (median of its repeats) exactly.

Which implementation vLLM runs for an in-node all-reduce (`vllm_picks_custom_ar`, from
vllm/distributed/device_communicators/custom_all_reduce.py `should_custom_ar` and
all_reduce_utils.py): its custom all-reduce when the world size is 2, 4, 6 or 8, the GPUs
are fully NVLink-connected (or there are only 2), and the tensor is smaller than
`max_size` = min(8 MiB, CUSTOM_ALL_REDUCE_MAX_SIZES[sm][world]) — on H100 (sm 9.0) 256 KiB
at 8 GPUs, 8 MiB at 2 and 4. Larger tensors go, in vLLM, to torch symmetric-memory
all-reduce (up to 64 MiB on sm 9.0) and then NCCL; there is no measured symm-mem table, so
both are priced with the NCCL curve (conservative for the symm-mem band).

Groups spanning nodes have no measured data here: they are composed like the analytical
backend (intra pieces from the tables, the network piece analytical) and counted.

MoE dispatch / combine kernels (an all_to_all op carrying ``MoeA2a``: --all2all-backend
deepep_high_throughput / deepep_low_latency) are priced from AIC's measured DeepEP tables
(``simulator.comm.moe_a2a``), analytically where none covers them (counted).
"""

from __future__ import annotations

from frontier.cache import cache_root

from collections import Counter
from pathlib import Path

import numpy as np

from frontier.gpu import GpuSpec
from frontier.ops import MoeA2a
from simulator.comm.analytical import AnalyticalCommBackend
from simulator.comm.group import CommGroup, Endpoint
from simulator.comm.moe_a2a import MoeA2aTables, tables_from_rows

MIB = 1 << 20
CUSTOM_AR_DEFAULT_MAX_BYTES = 8 * MIB               # CustomAllreduce(max_size=8192 * 1024)
CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)                # _SUPPORTED_WORLD_SIZES, minus 16 (MNNVL only)
CUSTOM_AR_MAX_BYTES = {                             # all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES
    90: {2: 64 * MIB, 4: 32 * MIB, 6: MIB // 2, 8: MIB // 4},
    100: {2: 2 * MIB, 4: 2 * MIB, 6: MIB, 8: MIB},
    103: {2: 4 * MIB, 4: 4 * MIB, 6: 8 * MIB, 8: 4 * MIB},
    107: {2: 4 * MIB, 4: 4 * MIB, 6: 8 * MIB, 8: 4 * MIB},
}

SHARED_AIC_DIR = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "aiconfigurator"
Curve = tuple[np.ndarray, np.ndarray]               # (log bytes ascending, log seconds)
# the cache folder of the imported tables; renamed when the importer's comm rows change, so a cache
# of older rows is not read (2026-12-01: "-2" + vLLM's DeepEP dispatch / combine, "-3" + SGLang's across nodes)
CACHE_NAME = "aiconfigurator-3"


def custom_ar_max_bytes(sm_version: int, world_size: int) -> int:
    """vLLM's custom all-reduce size limit (exclusive) for this GPU and group size."""
    return min(CUSTOM_AR_MAX_BYTES.get(sm_version, {}).get(world_size, CUSTOM_AR_DEFAULT_MAX_BYTES),
               CUSTOM_AR_DEFAULT_MAX_BYTES)


def vllm_picks_custom_ar(message_bytes: float, group: CommGroup, sm_version: int) -> bool:
    """True when vLLM runs its custom all-reduce for this tensor (module doc)."""
    n = group.size
    if not group.in_one_node or n not in CUSTOM_AR_WORLD_SIZES:
        return False
    if group.intra_link != "nvlink" and n != 2:
        return False
    return message_bytes < custom_ar_max_bytes(sm_version, n) and int(message_bytes) % 16 == 0


def curves_from_rows(df) -> dict[tuple[str, str, int], Curve]:
    """(impl "custom_ar" | "nccl", kind, num_gpus) -> curve, from comm profile rows."""
    out: dict[tuple[str, str, int], Curve] = {}
    rows = df[df["timing_mode"] == "kernel"]
    backend = rows["backend"].astype(str)
    impl = np.where(backend == "vllm_graph", "custom_ar", np.where(backend == "nccl", "nccl", ""))
    rows = rows.assign(impl=impl)
    rows = rows[rows["impl"] != ""]
    for (im, kind, n), g in rows.groupby(["impl", "op_name", "num_gpus"]):
        two_byte = g[g["dtype"].isin(["bf16", "fp16"])]
        g = two_byte if len(two_byte) else g
        g = g.groupby("message_bytes", as_index=False)["latency_s_median"].median()
        g = g[(g["message_bytes"] > 0) & (g["latency_s_median"] > 0)].sort_values("message_bytes")
        if len(g):
            out[(str(im), str(kind), int(n))] = (np.log(g["message_bytes"].to_numpy(float)),
                                                 np.log(g["latency_s_median"].to_numpy(float)))
    return out


class CalibratedCommBackend:
    """Measured tables where they cover the query, analytical elsewhere (counted)."""

    name = "calibrated"

    def __init__(self, gpu: GpuSpec, curves: dict[tuple[str, str, int], Curve],
                 moe_tables: MoeA2aTables | None = None) -> None:
        if not curves:
            raise ValueError(f"CalibratedCommBackend: no measured comm curves for {gpu.name}")
        self.gpu = gpu
        self.curves = curves
        self.moe_tables = moe_tables if moe_tables is not None else MoeA2aTables({})
        self.analytical = AnalyticalCommBackend(gpu)
        self.fallbacks: Counter[str] = Counter()    # "kind/n=<n>/<reason>" -> calls priced analytically
        self.extrapolated: Counter[str] = Counter()  # "moe_<phase>/n=<n>/<how>" -> calls off the measured points
        self._memo: dict[tuple, float] = {}    # (kind or MoeA2a, bytes, group) -> seconds

    def stats(self) -> dict[str, int]:
        """Summary counts (distinct queries: prices are memoized): all, priced analytically
        (``fallbacks``), priced off the measured points of a DeepEP table (``extrapolated``)."""
        return {"comm_queries": len(self._memo), "comm_queries_analytical": sum(self.fallbacks.values()),
                "comm_queries_extrapolated": sum(self.extrapolated.values())}

    def link_bandwidth_bytes_per_s(self, link: str) -> float:
        return self.analytical.link_bandwidth_bytes_per_s(link)

    def link_latency_s(self, link: str) -> float:
        return self.analytical.link_latency_s(link)

    def transfer_time_s(self, message_bytes: float, src: Endpoint, dst: Endpoint) -> float:
        self.fallbacks["p2p/no-table"] += 1
        return self.analytical.transfer_time_s(message_bytes, src, dst)

    def collective_time_s(self, kind: str, message_bytes: float, group: CommGroup) -> float:
        key = (kind, float(message_bytes), group)
        t = self._memo.get(key)
        if t is None:
            t = self._memo[key] = self._price(kind, float(message_bytes), group)
        return t

    def moe_a2a_time_s(self, moe: MoeA2a, message_bytes: float, group: CommGroup) -> float:
        """One MoE dispatch or combine kernel (``simulator.comm.moe_a2a``): its measured table
        when one covers the kernel, phase and EP size (across nodes: the one-node table scaled by
        the measured node ratio), else the analytical all_to_all of ``message_bytes`` (the routed
        bytes), counted."""
        key = (moe, float(message_bytes), group)
        t = self._memo.get(key)
        if t is None:
            t = self.moe_tables.time_s(moe, group, self.extrapolated)
            if t is None:
                where = "in-one-node" if group.in_one_node else "multi-node"
                t = self._fallback(f"moe_{moe.phase}", message_bytes, group, f"{moe.kernel}-{where}-no-table",
                                   kind="all_to_all")
            self._memo[key] = t
        return t

    def measured_time_s(self, impl: str, kind: str, message_bytes: float, n: int) -> float | None:
        """Interpolated latency of one curve, or None outside its measured range."""
        curve = self.curves.get((impl, kind, n))
        if curve is None or message_bytes <= 0:
            return None
        xs, ys = curve
        x = np.log(message_bytes)
        if x < xs[0] - 1e-12 or x > xs[-1] + 1e-12:
            return None
        return float(np.exp(np.interp(x, xs, ys)))

    def _price(self, kind: str, message_bytes: float, group: CommGroup) -> float:
        if group.size == 1 and kind != "p2p":
            return 0.0
        if kind == "p2p":
            return self._fallback(kind, message_bytes, group, "no-table")
        if group.in_one_node:
            return self._flat_in_node(kind, message_bytes, group)
        self.fallbacks[f"{kind}/n={group.size}/multi-node"] += 1
        return AnalyticalCommBackend.hierarchical_time_s(kind, message_bytes, group, self._flat_piece) \
            if group.ranks_per_node > 1 else self.analytical.collective_time_s(kind, message_bytes, group)

    def _flat_piece(self, kind: str, message_bytes: float, n: int, link: str) -> float:
        if link == "network" or n == 1:
            return self.analytical.flat_time_s(kind, message_bytes, n, link)
        group = CommGroup(n, max(n, self.gpu.gpus_per_node), n, link)
        return self._flat_in_node(kind, message_bytes, group)

    def _flat_in_node(self, kind: str, message_bytes: float, group: CommGroup) -> float:
        impl = "custom_ar" if kind == "all_reduce" and vllm_picks_custom_ar(
            message_bytes, group, self.gpu.sm_version) else "nccl"
        t = self.measured_time_s(impl, kind, message_bytes, group.size)
        if t is None:
            return self._fallback(kind, message_bytes, group, f"{impl}-out-of-range")
        return t

    def _fallback(self, name: str, message_bytes: float, group: CommGroup, reason: str,
                  kind: str | None = None) -> float:
        """The analytical price of collective ``kind`` (default ``name``), counted under ``name``."""
        self.fallbacks[f"{name}/n={group.size}/{reason}"] += 1
        return self.analytical.collective_time_s(kind or name, message_bytes, group)


def aic_data_root() -> Path | None:
    """The installed aiconfigurator_core package (None: the importer finds it) or the shared copy."""
    import importlib.util
    if importlib.util.find_spec("aiconfigurator_core") is not None:
        return None
    if (SHARED_AIC_DIR / "systems" / "data").is_dir():
        return SHARED_AIC_DIR
    raise ValueError(f"--comm-model calibrated needs aiconfigurator_core installed or {SHARED_AIC_DIR}")


def load_calibrated_backend(gpu: GpuSpec, data_root: Path | None = None,
                            cache_dir: Path | None = None) -> CalibratedCommBackend:
    """Comm tables of `gpu` from `cache_dir`/aiconfigurator (importing the AIC perf DB there
    on first use, via calibration.importers.aiconfigurator) -> CalibratedCommBackend."""
    from frontier.profile_schema import read_profiles
    root = Path(cache_dir or cache_root() / "profiles") / CACHE_NAME
    part = root / "family=comm" / f"gpu={gpu.name}"
    if not any(part.glob("part-*.parquet")):
        _import_comm(gpu, data_root if data_root is not None else aic_data_root(), root)
    df = read_profiles(root, family="comm", gpu=gpu.name)
    if not len(df):
        raise ValueError(f"no measured comm data for {gpu.name}; use --comm-model analytical")
    return CalibratedCommBackend(gpu, curves_from_rows(df), tables_from_rows(df))


def _import_comm(gpu: GpuSpec, data_root: Path | None, root: Path) -> None:
    """Import into a temp root, then move the gpu partition in place (atomic per GPU)."""
    import os
    import tempfile

    from calibration.importers.aiconfigurator import import_aiconfigurator_report
    from frontier.profile_schema import write_schema_marker
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".import-") as tmp:
        try:
            import_aiconfigurator_report(data_root, Path(tmp), gpus=[gpu.name], families=["comm"])
        except ValueError as exc:
            raise ValueError(f"no measured comm data for {gpu.name} ({exc}); use --comm-model analytical") from None
        src = Path(tmp) / "family=comm" / f"gpu={gpu.name}"
        if not src.is_dir():
            raise ValueError(f"no measured comm data for {gpu.name}; use --comm-model analytical")
        dst = root / "family=comm" / f"gpu={gpu.name}"
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_schema_marker(root)       # the importer wrote this code's schema version
        try:
            os.replace(src, dst)
        except OSError:   # another process imported it first
            pass
