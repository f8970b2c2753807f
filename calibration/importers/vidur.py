"""Import Vidur's profiling CSVs (github.com/microsoft/vidur, README: ../shared/datasets/vidur).

Found anywhere under ``path``:

* ``compute/<gpu>/<org>/<model>/mlp.csv`` -> linear rows for the four GEMMs of a layer on one
  TP rank (m = num_tokens): ``attn_pre_proj`` (QKV: k=n_embd, n=(heads/tp + 2*kv_heads/tp)*head_dim),
  ``attn_post_proj`` (k=heads/tp*head_dim, n=n_embd), ``mlp_up_proj`` (k=n_embd,
  n=n_expanded_embd*(2 if gated)/tp), ``mlp_down_proj`` (k=n_expanded_embd/tp, n=n_embd).
  fp16; per-op CUDA timing -> timing_mode "kernel". The same files' elementwise ops of a
  gated-MLP (Llama-like) model -> elementwise rows, as the kernels ``profiler/ops_elementwise.py``
  times and names (hidden_size = the op's width on the rank): ``input_layernorm`` and
  ``post_attention_layernorm`` -> ``rms_norm`` (width n_embd; Sarathi-Serve adds the residual
  separately, so these are the plain norm, not vLLM's fused_add_rms_norm), ``attn_rope`` ->
  ``rotary_embedding`` (width (heads + kv_heads)/tp x head_dim), ``mlp_act`` -> ``silu_and_mul``
  (width n_expanded_embd/tp). Skipped: ``emb`` (the vocab-parallel embedding, no profiled
  kernel), ``add`` (the residual add, which vLLM fuses into fused_add_rms_norm), and every
  elementwise op of a non-gated model (phi-2: LayerNorm, GELU, partial rotary).
* ``<gpu>/attention.csv`` -> attention rows: prefill (one chunk of ``prefill_chunk_size``
  new tokens over ``kv_cache_size`` cached tokens) and decode (``batch_size`` requests, KV
  length ``kv_cache_size + 1``). Latency = ``attn_prefill``/``attn_decode`` only (reshapes and
  any separate KV-cache save excluded). KINETO/record-function timing -> "kernel".
* ``network/<node>/{all_reduce,send_recv}.csv`` -> comm rows; ``size`` is fp16 elements
  (message_bytes = 2*size); timed eagerly (no CUDA graphs) -> "launch". Link: network when
  ``devices_per_node < num_workers``; pcie for >2 workers on a pairwise-NVLink node; else nvlink.
  A send_recv file byte-identical to one already read (h100_pairwise_nvlink) is a placeholder
  and is skipped.

Latency statistics: Vidur's median -> ``latency_s_median`` (ms -> s); it records min/max, not
p10/p90, so those stay null. ``device_name`` holds Vidur's device/node label.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.importers.rows import ImportReport, add, finish, write_rows
from frontier.gpu import get_gpu

_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# Vidur's elementwise ops of a gated-MLP model -> the profiled kernel each one is
_ELEMENTWISE = {"input_layernorm": "rms_norm", "post_attention_layernorm": "rms_norm",
                "attn_rope": "rotary_embedding", "mlp_act": "silu_and_mul"}
_SKIPPED_OPS = ("emb", "add")


def import_vidur(path: Path, out_root: Path) -> dict[str, int]:
    """Import every Vidur profiling CSV under ``path`` into ``out_root``; rows per family."""
    return import_vidur_report(path, out_root).rows


def import_vidur_report(path: Path, out_root: Path) -> ImportReport:
    """Like :func:`import_vidur`, returning rows per (gpu, family) and what was skipped."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"Vidur path {path} is not a directory; pass the vidur dataset folder")
    frames: dict[tuple[str, str], list[pd.DataFrame]] = {}
    skipped: list[str] = []
    for csv in sorted(path.rglob("mlp.csv")):
        rel = csv.relative_to(path)
        gpu = _gpu(rel.parts, "compute", skipped, rel)
        if gpu is None:
            continue
        d = pd.read_csv(csv)
        frames.setdefault(("linear", gpu), []).append(_mlp(d, csv, path, gpu))
        if _gated(d).all():
            frames.setdefault(("elementwise", gpu), []).append(_mlp_elementwise(d, csv, path, gpu))
        else:
            skipped.append(f"{rel}: elementwise ops of a non-gated MLP model (LayerNorm, GELU, partial "
                           "rotary: phi-2) are not the profiled kernels")
    for csv in sorted(path.rglob("attention.csv")):
        if "network" in csv.parts:
            skipped.append(f"{csv.relative_to(path)}: attention.csv inside network/ (misnamed upstream)")
            continue
        _collect(frames, "attention", _gpu((csv.parent.name,), None, skipped, csv.relative_to(path)), _attention, csv, path)
    seen: dict[str, Path] = {}
    for csv in sorted(path.rglob("network/*/*.csv")):
        digest = hashlib.sha256(csv.read_bytes()).hexdigest()
        if digest in seen:
            skipped.append(f"{csv.relative_to(path)}: byte-identical to {seen[digest].relative_to(path)} (placeholder)")
            continue
        seen[digest] = csv
        if csv.stem not in ("all_reduce", "send_recv"):
            skipped.append(f"{csv.relative_to(path)}: unknown collective file")
            continue
        _collect(frames, "comm", _gpu((csv.parent.name.split("_")[0],), None, skipped, csv.relative_to(path)), _network, csv, path)
    for csv in sorted(path.rglob("cpu_overheads.csv")):
        skipped.append(f"{csv.relative_to(path)}: CPU overheads have no profile family")
    if any(path.rglob("mlp.csv")):
        skipped.append(f"mlp.csv ops {', '.join(_SKIPPED_OPS)}: no profiled kernel (the vocab-parallel "
                       "embedding; the residual add, which vLLM fuses into fused_add_rms_norm)")
    if not frames and not skipped:
        raise ValueError(f"no Vidur profiling CSVs under {path} (data/profiling/compute/<gpu>/<model>/mlp.csv, "
                         "attention.csv, network/<gpu>_<link>/all_reduce.csv); pass the vidur dataset folder")
    rows: dict[str, int] = {}
    by_gpu: dict[str, dict[str, int]] = {}
    for (family, gpu), parts in sorted(frames.items()):
        add(rows, by_gpu, gpu, family, write_rows(parts, out_root, family, gpu))
    return ImportReport(rows=rows, rows_by_gpu=by_gpu, skipped=tuple(skipped))


def _gpu(parts: tuple[str, ...], after: str | None, skipped: list[str], csv: Path) -> str | None:
    label = parts[parts.index(after) + 1] if after in parts else parts[0]
    try:
        return get_gpu(label).name
    except ValueError:
        skipped.append(f"{csv}: device {label!r} not in the frontier GPU catalogue")
        return None


def _collect(frames, family, gpu, reader, csv: Path, root: Path) -> None:
    if gpu is not None:
        frames.setdefault((family, gpu), []).append(reader(pd.read_csv(csv), csv, root, gpu))


def _common(gpu: str, csv: Path, root: Path, label: str, **more) -> dict:
    return dict(gpu=gpu, device_name=label, framework="sarathi-serve", source="vidur",
                source_table=str(csv.relative_to(root)), **more)


def _gated(d: pd.DataFrame) -> pd.Series:
    return d["use_gated_mlp"].astype(str).str.lower().eq("true")


def _compute_label(csv: Path, root: Path) -> str:
    parts = csv.relative_to(root).parts
    return parts[parts.index("compute") + 1]


def _mlp(d: pd.DataFrame, csv: Path, root: Path, gpu: str) -> pd.DataFrame:
    tp = d["num_tensor_parallel_workers"].astype("int64")
    hd = d["n_embd"] // d["n_head"]
    heads, kv_heads = d["n_head"] // tp, np.maximum(1, d["n_kv_head"] // tp)
    gated = _gated(d).map({True: 2, False: 1})
    shapes = {
        "attn_pre_proj": ((heads + 2 * kv_heads) * hd, d["n_embd"]),
        "attn_post_proj": (d["n_embd"], heads * hd),
        "mlp_up_proj": (d["n_expanded_embd"] * gated // tp, d["n_embd"]),
        "mlp_down_proj": (d["n_embd"], d["n_expanded_embd"] // tp),
    }
    label = _compute_label(csv, root)
    out = []
    for op in _GEMMS:
        n, k = shapes[op]
        out.append(pd.DataFrame({"op_name": op, "m": d["num_tokens"], "n": n, "k": k, "dtype": "fp16",
                                 "latency_s_median": d[f"time_stats.{op}.median"] / 1e3}))
    df = pd.concat(out, ignore_index=True)
    return finish(df, "linear", timing_mode="kernel", **_common(gpu, csv, root, label))


def _mlp_elementwise(d: pd.DataFrame, csv: Path, root: Path, gpu: str) -> pd.DataFrame:
    """Elementwise rows (``_ELEMENTWISE``) of a gated-MLP model's mlp.csv, widths on the rank."""
    tp = d["num_tensor_parallel_workers"].astype("int64")
    hd = d["n_embd"] // d["n_head"]
    widths = {"input_layernorm": d["n_embd"], "post_attention_layernorm": d["n_embd"],
              "attn_rope": (d["n_head"] // tp + np.maximum(1, d["n_kv_head"] // tp)) * hd,
              "mlp_act": d["n_expanded_embd"] // tp}
    out = [pd.DataFrame({"op_name": kind, "num_tokens": d["num_tokens"], "hidden_size": widths[op], "dtype": "fp16",
                         "latency_s_median": d[f"time_stats.{op}.median"] / 1e3})
           for op, kind in _ELEMENTWISE.items() if f"time_stats.{op}.median" in d.columns]
    if not out:
        return pd.DataFrame()    # write_rows skips empty frames
    df = pd.concat(out, ignore_index=True)
    return finish(df, "elementwise", timing_mode="kernel", **_common(gpu, csv, root, _compute_label(csv, root)))


def _attention(d: pd.DataFrame, csv: Path, root: Path, gpu: str) -> pd.DataFrame:
    pre = d["is_prefill"].astype(str).str.lower().eq("true")
    tp = d["num_tensor_parallel_workers"].astype("int64")
    b = d["batch_size"].astype("int64")
    zero = pd.Series(0, index=d.index, dtype="int64")
    plen = d["prefill_chunk_size"].where(pre, 0).astype("int64")
    dctx = (d["kv_cache_size"] + 1).where(~pre, 0).astype("int64")
    latency = d["time_stats.attn_prefill.median"].where(pre, d["time_stats.attn_decode.median"]) / 1e3
    out = pd.DataFrame({
        "op_name": pre.map({True: "context", False: "generation"}), "scope": "kernel", "batch_size": b,
        "num_prefill": b.where(pre, 0), "num_decode": b.where(~pre, 0), "prefill_tokens": (b * plen).where(pre, 0),
        "prefill_ctx_max": d["kv_cache_size"].where(pre, 0).astype("int64"),
        "num_heads": d["n_q_head"] // tp, "num_kv_heads": np.maximum(1, d["n_kv_head"] // tp),
        "head_dim": d["n_embd"] // d["n_q_head"], "window_size": zero, "attn_dtype": "fp16", "kv_dtype": "fp16",
        "is_mla": False, "latency_s_median": latency,
        "backend": d["attention_backend"].astype(str).str.replace("AttentionBackend.", "", regex=False),
        "timing_mode": d["profile_method"].astype(str).str.contains("KINETO|RECORD_FUNCTION")
        .map({True: "kernel", False: "launch"}),
    })
    for stat in ("min", "max", "mean", "p50", "p90"):
        out[f"prefill_len_{stat}"] = plen
        out[f"decode_ctx_{stat}"] = dctx
    out = out[latency.notna()]
    return finish(out, "attention", **_common(gpu, csv, root, csv.parent.name))


def _network(d: pd.DataFrame, csv: Path, root: Path, gpu: str) -> pd.DataFrame:
    node, coll = csv.parent.name, csv.stem
    workers, per_node = d["num_workers"].astype("int64"), d["devices_per_node"].astype("int64")
    link = pd.Series("nvlink", index=d.index)
    if "pairwise" in node:
        link[workers > 2] = "pcie"
    link[per_node < workers] = "network"
    out = pd.DataFrame({"op_name": "all_reduce" if coll == "all_reduce" else "p2p",
                        "message_bytes": d["size"].astype("int64") * 2, "num_gpus": workers, "dtype": "fp16",
                        "link": link, "latency_s_median": d[f"time_stats.{coll}.median"] / 1e3})
    return finish(out, "comm", timing_mode="launch", backend="torch.distributed", **_common(gpu, csv, root, node))
