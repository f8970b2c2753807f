"""The profile schema: Parquet rows of timed operator calls (and memory runs), shared by
``profiler/`` (writes), ``calibration/`` importers (write) and predictors (read).

One row = one timed operator call on one GPU rank (or, family "memory", one dummy memory
run). Families: linear (GEMMs), attention, moe, elementwise (norms, RoPE, activation, KV
write), comm (collectives), memory. Files form a hive partition::

    <root>/family=<family>/gpu=<gpu>/part-<n>.parquet

Identity lives in columns too (``family`` and ``gpu`` are repeated inside every file), so a
file read on its own is complete. Every row carries :data:`SCHEMA_VERSION`; a root holds one
version only.

Units: latencies in seconds (``latency_s_*``), sizes in bytes (``*_bytes``). Lengths are
token counts.
"""

from __future__ import annotations

import functools
import operator
import os
import uuid
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from frontier.ops import MOE_A2A_OPS

# Adding a family leaves every existing file readable (its columns are unchanged), so it does
# not bump the version; bundles refuse any other version, and a bump would orphan them all.
SCHEMA_VERSION = 1

FAMILIES = ("linear", "attention", "moe", "elementwise", "comm", "gdn", "encoder_attention", "memory")
TIMING_MODES = ("kernel", "launch")  # kernel: CUDA-graph replay / kernel-only; launch: eager, launch-inclusive
SOURCES = ("aiconfigurator", "vidur", "frontier-profiler")
DTYPES = ("fp32", "fp16", "bf16", "fp8", "fp8_block", "int8", "int4_wo", "nvfp4", "mxfp4",
          "w4a16_mxfp4", "w4a8_mxfp4_mxfp8")
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                  "float": "fp32", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8"}
ATTENTION_OPS = ("context", "generation", "mixed")
ELEMENTWISE_OPS = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul", "kv_cache_write")
COMM_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p") + MOE_A2A_OPS
LINKS = ("nvlink", "network", "pcie")
# the gated delta rule's prefill (chunked) and decode (recurrent) kernels, the causal conv1d's (conv1d, conv1d_update)
GDN_OPS = ("chunked", "recurrent", "conv1d", "conv1d_update")
ENCODER_ATTENTION_OPS = ("vit",)   # a vision tower's non-causal attention (vLLM's ViT flash attention)

_S, _I, _F, _B = pa.string(), pa.int64(), pa.float64(), pa.bool_()

COMMON = pa.schema([
    ("family", _S),
    ("timing_mode", _S),          # "kernel" | "launch"; null only for family "memory"
    ("latency_s_median", _F),     # null only for family "memory"
    ("latency_s_p10", _F),        # null when unknown
    ("latency_s_p90", _F),        # null when unknown
    ("num_samples", _I),          # null when unknown
    ("gpu", _S),                  # catalogue name: frontier.gpu.get_gpu(...).name
    ("device_name", _S),          # torch.cuda.get_device_name() as recorded
    ("framework", _S),            # e.g. "vllm", "nccl", "sarathi"
    ("framework_version", _S),
    ("backend", _S),              # e.g. "vllm_graph", "nccl", attention backend
    ("kernel_source", _S),        # concrete kernel path as the data names it
    ("source", _S),               # "aiconfigurator" | "vidur" | "frontier-profiler"
    ("source_table", _S),         # the table/file the row came from
    ("driver_version", _S),
    ("cuda_version", _S),
    ("torch_version", _S),
    ("git_sha", _S),
    ("schema_version", pa.int32()),
])

# Family-specific columns (the operator spec). Appended after COMMON.
FAMILY_COLUMNS: dict[str, pa.Schema] = {
    # Y[m,n] = X[m,k] W[k,n]; m = tokens in the TP slice, n/k already sharded.
    "linear": pa.schema([("op_name", _S), ("m", _I), ("n", _I), ("k", _I), ("dtype", _S)]),
    # The batch's length distribution. Stats over an empty set (no prefill / no decode
    # requests) are 0. prefill_len = new tokens per prefill request; prefill_ctx = cached
    # prefix per prefill request; decode_ctx = KV length (incl. the new token) per decode
    # request. scope: "kernel" (attention kernel + KV-cache write) or "module" (whole MLA
    # module incl. q/kv projections, RoPE and output projection).
    "attention": pa.schema([
        ("op_name", _S), ("scope", _S),
        ("batch_size", _I), ("num_prefill", _I), ("num_decode", _I), ("prefill_tokens", _I),
        ("prefill_len_min", _I), ("prefill_len_max", _I), ("prefill_len_mean", _F),
        ("prefill_len_p50", _F), ("prefill_len_p90", _F), ("prefill_ctx_max", _I),
        ("decode_ctx_min", _I), ("decode_ctx_max", _I), ("decode_ctx_mean", _F),
        ("decode_ctx_p50", _F), ("decode_ctx_p90", _F),
        ("num_heads", _I), ("num_kv_heads", _I), ("head_dim", _I), ("window_size", _I),
        ("attn_dtype", _S), ("kv_dtype", _S), ("is_mla", _B),
        # MLA only (null otherwise): latent dims and the projection GEMM dtype of the module.
        ("kv_lora_rank", _I), ("q_lora_rank", _I), ("qk_nope_head_dim", _I),
        ("qk_rope_head_dim", _I), ("v_head_dim", _I), ("mla_gemm_dtype", _S),
    ]),
    # Fused routed-expert MLP on one rank; full-model shape + the parallel layout.
    # Load stats: tokens per expert on the measured rank (null when unknown).
    "moe": pa.schema([
        ("op_name", _S), ("num_tokens", _I), ("hidden_size", _I), ("inter_size", _I),
        ("topk", _I), ("num_experts", _I), ("moe_tp_size", _I), ("moe_ep_size", _I),
        ("moe_dtype", _S), ("distribution", _S),
        ("max_tokens_per_expert", _F), ("var_tokens_per_expert", _F),
    ]),
    # Memory-bound op over num_tokens rows of width hidden_size (per rank, elements): the
    # norm width, (H + KV)/tp * head_dim for RoPE, I/tp (output) for silu_and_mul, and
    # 2 * KV/tp * head_dim for the KV-cache write. See profiler/ops_elementwise.py.
    "elementwise": pa.schema([("op_name", _S), ("num_tokens", _I), ("hidden_size", _I), ("dtype", _S)]),
    # moe_dispatch / moe_combine rows (an MoE all2all kernel, e.g. DeepEP; `backend` names it):
    # num_tokens = tokens each rank dispatches, the layer's hidden_size, topk and num_experts;
    # message_bytes = num_tokens x hidden_size x dtype bytes. Null on collectives (and in files
    # written before these columns: they read as null).
    "comm": pa.schema([
        ("op_name", _S), ("message_bytes", _I), ("num_gpus", _I), ("dtype", _S), ("link", _S),
        ("num_tokens", _I), ("hidden_size", _I), ("topk", _I), ("num_experts", _I),
    ]),
    # A batch-shaped kernel of one Gated DeltaNet layer on one rank: the gated delta rule (vLLM's
    # chunked prefill scan, or the recurrent decode update) or the causal conv1d before it (its
    # prefill and decode kernels); batch_size sequences of seq_len new tokens each (the longest, for
    # a batch of unequal ones), num_tokens in all; heads already divided by TP; state_dtype: the
    # kernel's state (the delta rule's temporal state: fp32 for Qwen3.5; the conv state: bf16);
    # d_conv: the conv1d's window.
    "gdn": pa.schema([
        ("op_name", _S), ("batch_size", _I), ("seq_len", _I), ("num_tokens", _I), ("num_k_heads", _I),
        ("num_v_heads", _I), ("head_k_dim", _I), ("head_v_dim", _I), ("state_dtype", _S), ("d_conv", _I),
    ]),
    # A vision tower block's attention on one rank (vLLM's ViT flash attention): batch_size images
    # of seq_len patches each, num_tokens (= batch_size x seq_len) patches in all; heads already
    # divided by TP; dtype of q, k, v.
    "encoder_attention": pa.schema([
        ("op_name", _S), ("batch_size", _I), ("seq_len", _I), ("num_tokens", _I), ("num_heads", _I),
        ("head_dim", _I), ("dtype", _S),
    ]),
    "memory": pa.schema([
        ("model", _S), ("tp", _I), ("pp", _I), ("ep", _I), ("max_num_batched_tokens", _I),
        ("weights_bytes", _I), ("torch_peak_increase_bytes", _I), ("non_torch_bytes", _I),
        ("cuda_graph_bytes", _I),
    ]),
}

_ENUMS: dict[str, dict[str, tuple[str, ...]]] = {
    "linear": {"dtype": DTYPES},
    "attention": {"op_name": ATTENTION_OPS, "scope": ("kernel", "module")},
    "moe": {"moe_dtype": DTYPES},
    "elementwise": {"op_name": ELEMENTWISE_OPS, "dtype": DTYPES},
    "comm": {"op_name": COMM_OPS, "link": LINKS},
    "gdn": {"op_name": GDN_OPS, "state_dtype": DTYPES},
    "encoder_attention": {"op_name": ENCODER_ATTENTION_OPS, "dtype": DTYPES},
    "memory": {},
}


def normalize_dtype(name: str) -> str:
    """Canonical dtype name ("bfloat16" -> "bf16", "half" -> "fp16"); ValueError if unknown."""
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return key


def schema_for(family: str) -> pa.Schema:
    """Full arrow schema (COMMON + family columns) of one family."""
    _check_family(family)
    return pa.schema(list(COMMON) + list(FAMILY_COLUMNS[family]))


def columns_for(family: str) -> list[str]:
    """Column names, in order, of one family."""
    return schema_for(family).names


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown profile family {family!r}; valid: {', '.join(FAMILIES)}")


def validate(df: pd.DataFrame, family: str) -> None:
    """Raise ValueError (one line) if ``df`` does not satisfy the family's contract."""
    cols = columns_for(family)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{family} profile lacks columns {missing}; required: {cols}")
    extra = [c for c in df.columns if c not in cols]
    if extra:
        raise ValueError(f"{family} profile has unknown columns {extra}; valid: {cols}")
    if len(df) == 0:
        return
    versions = {int(v) for v in df["schema_version"].dropna().unique()}
    if versions != {SCHEMA_VERSION}:
        raise ValueError(f"profile schema_version {sorted(versions)} unsupported; valid: {SCHEMA_VERSION}")
    _check_values(df, "family", (family,))
    _check_values(df, "source", SOURCES)
    if family == "memory":
        _check_values(df, "timing_mode", TIMING_MODES, allow_null=True)
    else:
        _check_values(df, "timing_mode", TIMING_MODES)
        if df["latency_s_median"].isna().any():
            raise ValueError(f"{family} profile has null latency_s_median; every timed row needs one")
    if df["gpu"].isna().any():
        raise ValueError(f"{family} profile has null gpu; use frontier.gpu.get_gpu(...).name")
    for col, valid in _ENUMS[family].items():
        _check_values(df, col, valid)


def _check_values(df: pd.DataFrame, col: str, valid: tuple[str, ...], allow_null: bool = False) -> None:
    seen = df[col].dropna().unique() if allow_null else df[col].unique()
    bad = sorted({str(v) for v in seen if v not in valid})
    if bad:
        raise ValueError(f"column {col!r} has values {bad}; valid: {', '.join(valid)}")


def to_table(df: pd.DataFrame, family: str) -> pa.Table:
    """Validated arrow table in the family's column order and types."""
    df = pd.DataFrame(df)
    validate(df, family)
    return pa.Table.from_pandas(df[columns_for(family)], schema=schema_for(family), preserve_index=False)


def write_profile(table_or_df: pa.Table | pd.DataFrame, root: str | Path, family: str, gpu: str) -> Path:
    """Write rows of one (family, gpu) as a new part file; returns its path.

    Atomic: written to a temp file then renamed. Refuses a root that already holds another
    schema_version, and rows whose ``gpu`` column differs from ``gpu``.
    """
    _check_family(family)
    df = table_or_df.to_pandas() if isinstance(table_or_df, pa.Table) else pd.DataFrame(table_or_df)
    if len(df) and set(df["gpu"].unique()) != {gpu}:
        raise ValueError(f"rows have gpu {sorted(map(str, df['gpu'].unique()))}; partition gpu is {gpu!r}")
    table = to_table(df, family)
    root = Path(root)
    check_root_version(root)
    folder = root / f"family={family}" / f"gpu={gpu}"
    folder.mkdir(parents=True, exist_ok=True)
    write_schema_marker(root)
    n = len(list(folder.glob("part-*.parquet")))
    while (folder / f"part-{n}.parquet").exists():
        n += 1
    path = folder / f"part-{n}.parquet"
    tmp = folder / f".tmp-{uuid.uuid4().hex}.parquet"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def write_schema_marker(root: Path) -> None:
    """Write ``root/_schema_version`` (this code's SCHEMA_VERSION) when missing or stale, atomically
    (temp file then rename, as the parts): a killed writer never leaves an empty marker."""
    marker = root / "_schema_version"
    if not marker.is_file() or marker.read_text().strip() != str(SCHEMA_VERSION):
        tmp_marker = root / f".tmp-{uuid.uuid4().hex}"
        tmp_marker.write_text(f"{SCHEMA_VERSION}\n")
        os.replace(tmp_marker, marker)


def root_schema_version(root: Path) -> str | None:
    """The schema version a profile root holds: its ``_schema_version`` marker, else (roots
    written before the marker, or an empty marker a killed writer left before it was written
    atomically) the version in its first part file; None for a root without profiles."""
    marker = root / "_schema_version"
    found = marker.read_text().strip() if marker.is_file() else ""
    if found:
        return found
    part = next(iter(root.glob("family=*/gpu=*/part-*.parquet")), None)
    if part is None:
        return None
    versions = pq.read_table(part, columns=["schema_version"]).column(0).to_pylist()[:1]
    return str(versions[0]) if versions else None


def check_root_version(root: Path, name: str | None = None, advice: str = "") -> None:
    """Refuse a profile root written by another schema version. ``name`` names the folder in the
    message (default "profile root ROOT"); ``advice`` is appended to it."""
    found = root_schema_version(root)
    if found is not None and found != str(SCHEMA_VERSION):
        raise ValueError(f"{name or f'profile root {root}'} holds schema_version {found}; this code writes "
                         f"{SCHEMA_VERSION}{advice}")


def read_profiles(root: str | Path, family: str | None = None, gpu: str | None = None) -> pd.DataFrame:
    """Rows under ``root`` for one family (all GPUs unless ``gpu``), validated.

    ``family=None`` is allowed only when the root holds a single family.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"profile root {root} is not a directory")
    check_root_version(root)
    families = sorted(p.name.split("=", 1)[1] for p in root.glob("family=*") if p.is_dir())
    if family is None:
        if len(families) != 1:
            raise ValueError(f"profile root {root} holds families {families}; pass family= one of them")
        family = families[0]
    _check_family(family)
    gpu_glob = f"gpu={gpu}" if gpu is not None else "gpu=*"
    parts = sorted((root / f"family={family}").glob(f"{gpu_glob}/part-*.parquet"))
    if not parts:
        return schema_for(family).empty_table().to_pandas()
    frames = [pq.read_table(p, schema=schema_for(family)).to_pandas() for p in parts]
    df = pd.concat(frames, ignore_index=True)
    validate(df, family)
    return df


# Operator columns an operator row (a query, not a measurement) must hold with a value, and
# the smallest valid value of each numeric one (token counts and shapes >= 1, batch
# composition >= 0). Columns the predictors treat as optional (attention prefill_ctx_max,
# window_size, is_mla; MoE distribution and load statistics) may be empty.
OPERATOR_MINIMUM: dict[str, dict[str, float]] = {
    "linear": {"m": 1, "n": 1, "k": 1},
    "attention": {"batch_size": 1, "num_prefill": 0, "num_decode": 0, "prefill_tokens": 0,
                  "prefill_len_min": 0, "prefill_len_max": 0, "prefill_len_mean": 0, "prefill_len_p50": 0,
                  "prefill_len_p90": 0, "decode_ctx_min": 0, "decode_ctx_max": 0, "decode_ctx_mean": 0,
                  "decode_ctx_p50": 0, "decode_ctx_p90": 0, "num_heads": 1, "num_kv_heads": 1, "head_dim": 1},
    "moe": {"num_tokens": 1, "hidden_size": 1, "inter_size": 1, "topk": 1, "num_experts": 1,
            "moe_tp_size": 1, "moe_ep_size": 1},
    "elementwise": {"num_tokens": 1, "hidden_size": 1},
    "comm": {"message_bytes": 1, "num_gpus": 1},
    "gdn": {"batch_size": 1, "seq_len": 1, "num_tokens": 1, "num_k_heads": 1, "num_v_heads": 1, "head_k_dim": 1,
            "head_v_dim": 1, "d_conv": 1},
    "encoder_attention": {"batch_size": 1, "seq_len": 1, "num_tokens": 1, "num_heads": 1, "head_dim": 1},
}
OPERATOR_OPTIONAL_MINIMUM: dict[str, dict[str, float]] = {
    "attention": {"prefill_ctx_max": 0, "window_size": 0},
    "moe": {"max_tokens_per_expert": 0, "var_tokens_per_expert": 0},
}
OPERATOR_ENUMS: dict[str, tuple[str, ...]] = {
    "linear": ("dtype",), "attention": ("kv_dtype",), "moe": ("moe_dtype",),
    "elementwise": ("op_name", "dtype"), "comm": ("op_name", "link"), "gdn": ("op_name", "state_dtype"),
    "encoder_attention": ("op_name", "dtype"),
}


def check_operator_rows(df: pd.DataFrame, family: str, where: str = "row") -> None:
    """Raise ValueError (one line, naming ``where`` and the row's index label, the column, the
    value and what is valid) unless every row of ``df`` is a well-formed operator query of
    ``family``: required values present, numbers finite and at least their minimum
    (``OPERATOR_MINIMUM``), integer columns whole, names among the schema's values, and no
    statistics that contradict each other (``_contradictions``). Missing columns are the
    caller's to report (the predictors name them). Vectorized: ~0.05-0.1 s for 200k attention rows."""
    _check_family(family)
    types = {f.name: f.type for f in FAMILY_COLUMNS[family]}
    columns = {**{c: (m, True) for c, m in OPERATOR_MINIMUM[family].items()},
               **{c: (m, False) for c, m in OPERATOR_OPTIONAL_MINIMUM.get(family, {}).items()}}
    present = [c for c in columns if c in df.columns]
    numbers = pd.DataFrame({c: pd.to_numeric(df[c], errors="coerce") for c in present}, index=df.index)
    for col in present:
        minimum, required = columns[col]
        empty = df[col].isna()
        if required and empty.any():
            label = empty.idxmax()
            raise ValueError(f"{where} {label}: {family} column {col!r} is empty; give a number >= {minimum:g}")
        v = numbers[col]
        whole = types[col] == _I
        ok = (v >= minimum) & np.isfinite(v)
        if whole:
            ok &= v == np.floor(v)
        bad = ~empty & ~ok
        if bad.any():
            label = bad.idxmax()
            kind = "a whole number" if whole else "a finite number"
            raise ValueError(f"{where} {label}: {family} column {col}={_plain(df[col][label])!r}; valid: {kind} >= {minimum:g}")
    for col in OPERATOR_ENUMS[family]:
        if col not in df.columns:
            continue
        valid = DTYPES if col in ("dtype", "kv_dtype", "moe_dtype") else _ENUMS[family][col]
        bad = ~df[col].isin(valid)
        if bad.any():
            label = bad.idxmax()
            raise ValueError(f"{where} {label}: {family} column {col}={_plain(df[col][label])!r}; valid: {', '.join(valid)}")
    checks = _contradictions(numbers, family)
    if checks:
        bad = functools.reduce(operator.or_, (mask for mask, _ in checks))
        if bad.any():
            label = bad.idxmax()
            row = {c: _plain(numbers[c][label]) for c in numbers.columns}
            problem = next(describe(row) for mask, describe in checks if mask[label])
            raise ValueError(f"{where} {label}: {family} row has {problem}")


def _plain(value):
    """A numpy scalar as the Python number it holds (for messages), anything else as is."""
    return value.item() if isinstance(value, np.generic) else value


def _contradictions(n: pd.DataFrame, family: str) -> list[tuple[pd.Series, Callable[[dict], str]]]:
    """(rows that contradict themselves, what the contradiction is given one such row's values)
    of each self-consistency check of a family's numeric operator columns ``n``, in the order a
    row's message names the first that fails."""
    checks: list[tuple[pd.Series, Callable[[dict], str]]] = []
    if family == "moe" and {"topk", "num_experts", "moe_ep_size"} <= set(n.columns):
        checks += [(n["topk"] > n["num_experts"], lambda r: f"topk={r['topk']} > num_experts={r['num_experts']}"),
                   (n["moe_ep_size"] > n["num_experts"],
                    lambda r: f"moe_ep_size={r['moe_ep_size']} > num_experts={r['num_experts']}")]
    if family == "gdn" and {"batch_size", "seq_len", "num_tokens"} <= set(n.columns):
        # batch_size sequences of at most seq_len tokens, one of them seq_len long
        b, s, t = n["batch_size"], n["seq_len"], n["num_tokens"]
        checks.append(((t > b * s) | (t < s + b - 1),
                       lambda r: f"num_tokens={r['num_tokens']} outside [seq_len + batch_size - 1, "
                                 f"batch_size x seq_len] = [{r['seq_len'] + r['batch_size'] - 1}, "
                                 f"{r['batch_size'] * r['seq_len']}]"))
    if family != "attention" or not set(OPERATOR_MINIMUM["attention"]) <= set(n.columns):
        return checks
    npre, ndec = n["num_prefill"], n["num_decode"]
    checks.append((n["batch_size"] != npre + ndec, lambda r: f"batch_size={r['batch_size']} != num_prefill + "
                                                            f"num_decode = {r['num_prefill'] + r['num_decode']}"))
    for part, count in (("prefill_len", npre), ("decode_ctx", ndec)):
        lo, mean, p50, p90, hi = (n[f"{part}_{s}"] for s in ("min", "mean", "p50", "p90", "max"))
        nonzero = (lo != 0) | (mean != 0) | (p50 != 0) | (p90 != 0) | (hi != 0)
        ordered = (lo <= p50) & (p50 <= p90) & (p90 <= hi) & (lo <= mean) & (mean <= hi)
        checks += [((count == 0) & nonzero,
                    lambda r, part=part: f"no {part.split('_')[0]} requests but {part}_* statistics other than 0"),
                   ((count > 0) & ~ordered,
                    lambda r, part=part: f"{part}_min <= p50 <= p90 <= max and min <= mean <= max violated "
                                         f"({r[part + '_min']}, {r[part + '_p50']}, {r[part + '_p90']}, "
                                         f"{r[part + '_max']}; mean {r[part + '_mean']})")]
    checks.append(((n["prefill_tokens"] - npre * n["prefill_len_mean"]).abs() > 0.5,
                   lambda r: f"prefill_tokens={r['prefill_tokens']} != num_prefill x prefill_len_mean = "
                             f"{r['num_prefill'] * r['prefill_len_mean']:g}"))
    return checks
