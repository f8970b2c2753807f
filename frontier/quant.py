"""Weight / KV-cache quantization of a model: `QuantSpec` and its parser.

Bytes per weight element include the scale overhead of each format:

| method    | element bits | scales                                   | bytes / param            |
|-----------|--------------|------------------------------------------|--------------------------|
| none      | 16 (bf16)    | -                                        | 2.0                      |
| fp8       | 8            | one fp32 per tensor/channel (negligible) | 1.0                      |
| fp8_block | 8            | one fp32 per b0 x b1 block (128x128)     | 1 + 4/(b0*b1) = 1.000244 |
| mxfp4     | 4            | one E8M0 byte per 32 elements            | 0.5 + 1/32 = 0.53125     |
| nvfp4     | 4            | one fp8 E4M3 per 16 elements (+1 fp32/t) | 0.5 + 1/16 = 0.5625      |
| int4_wo   | 4            | bf16 scale per group g (+ packed 4-bit   | 0.5 + 2/g (symmetric)    |
|           |              | zero point for AWQ/GPTQ)                 | 0.5 + 2.5/g (awq/gptq)   |
| nvfp4_w4a16 | 4          | as nvfp4; bf16 activations (FP4 Marlin)  | 0.5 + 1/16 = 0.5625      |

Embeddings, norms and MoE routers are never quantized here (bf16, 2 bytes), nor the LM head
but in a mixed-precision checkpoint that lists it; `quantized_parts` says which of the big
weight groups use `weight_bytes_per_param` (see `PARTS`; "linear_attention": Gated DeltaNet
layers' projections). A modelopt MIXED_PRECISION checkpoint (``quantized_layers``: an algorithm
per layer, as vLLM's ``ModelOptMixedPrecisionConfig`` reads it; NVIDIA's Qwen3.6 NVFP4: FP8
attention and GDN projections, W4A16 NVFP4 MLPs, experts and LM head) has one format per part:
``method`` is the experts' (else the dense MLP's), ``part_methods`` the others'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

METHODS = ("none", "fp8", "fp8_block", "mxfp4", "nvfp4", "int4_wo", "nvfp4_w4a16")
PARTS = ("attention", "dense_mlp", "shared_experts", "routed_experts", "linear_attention")
LM_HEAD = "lm_head"     # a weight group only a mixed-precision checkpoint quantizes (part_methods)
BF16_BYTES = 2.0
# bytes per element of the formats a mixed-precision checkpoint names per layer
METHOD_BYTES = {"none": BF16_BYTES, "fp8": 1.0, "nvfp4": 0.5 + 1.0 / 16, "nvfp4_w4a16": 0.5 + 1.0 / 16}
# modelopt MIXED_PRECISION quant_algo -> method
MIXED_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4_w4a16"}


@dataclass(frozen=True)
class QuantSpec:
    """How weights and KV cache are stored.

    method: one of METHODS.
    weight_bytes_per_param: bytes per weight element of quantized layers, scales included.
    kv_bytes_per_elem: KV-cache element bytes (2.0 bf16/fp16, 1.0 fp8).
    activation_bytes: activation element bytes (2.0 bf16).
    quantized_parts: which of PARTS are stored at weight_bytes_per_param; the rest stay bf16.
    weight_block_size: (block_n, block_k) of block-scaled weights (fp8_block), None otherwise;
        vLLM needs every tensor-parallel shard to hold whole blocks (ParallelSpec.check_model).
    part_methods: (part, method) of a mixed-precision checkpoint's parts (PARTS or LM_HEAD) stored
        in another format than ``method``, at METHOD_BYTES of it.
    """

    method: str = "none"
    weight_bytes_per_param: float = BF16_BYTES
    kv_bytes_per_elem: float = BF16_BYTES
    activation_bytes: float = BF16_BYTES
    quantized_parts: tuple[str, ...] = field(default=PARTS)
    weight_block_size: tuple[int, int] | None = None
    part_methods: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"QuantSpec.method={self.method!r} is not one of {METHODS}")
        for name in ("weight_bytes_per_param", "kv_bytes_per_elem", "activation_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"QuantSpec.{name}={getattr(self, name)} must be > 0")
        bad = [p for p in self.quantized_parts if p not in PARTS]
        if bad:
            raise ValueError(f"QuantSpec.quantized_parts has unknown parts {bad}; valid: {PARTS}")
        bad = [(p, m) for p, m in self.part_methods if p not in PARTS + (LM_HEAD,) or m not in METHOD_BYTES]
        if bad:
            raise ValueError(f"QuantSpec.part_methods has unknown entries {bad}; parts {PARTS + (LM_HEAD,)}, "
                             f"methods {tuple(METHOD_BYTES)}")

    def method_of(self, part: str) -> str:
        """The format `part` (one of PARTS, or LM_HEAD) is stored in: "none" when unquantized."""
        for p, m in self.part_methods:
            if p == part:
                return m
        return self.method if part in self.quantized_parts else "none"

    def bytes_per_param(self, part: str) -> float:
        """Bytes per weight element of `part` (one of PARTS, or LM_HEAD)."""
        if part not in PARTS and part != LM_HEAD:
            raise ValueError(f"unknown weight part {part!r}; valid: {PARTS + (LM_HEAD,)}")
        for p, m in self.part_methods:
            if p == part:
                return METHOD_BYTES[m]
        return self.weight_bytes_per_param if part in self.quantized_parts else BF16_BYTES

    @property
    def label(self) -> str:
        """The method, or for a mixed-precision checkpoint each part's format."""
        if not self.part_methods:
            return self.method
        parts = [(p, self.method) for p in self.quantized_parts] + list(self.part_methods)
        parts.sort(key=lambda pm: (PARTS + (LM_HEAD,)).index(pm[0]))
        return "mixed (" + ", ".join(f"{p} {m}" for p, m in parts) + ")"

    @classmethod
    def from_method(cls, method: str, kv_cache_dtype: str = "auto", group_size: int = 128) -> QuantSpec:
        """QuantSpec for a CLI-style choice (vLLM `--quantization`, `--kv-cache-dtype`); all parts quantized."""
        kv = kv_bytes_for_dtype(kv_cache_dtype)
        if method == "fp8_block":
            return _fp8_block((128, 128), kv, PARTS)
        per_param = {
            "none": BF16_BYTES,
            "fp8": 1.0,
            "mxfp4": 0.5 + 1.0 / 32,
            "nvfp4": 0.5 + 1.0 / 16,
            "int4_wo": 0.5 + 2.0 / group_size,
            "nvfp4_w4a16": 0.5 + 1.0 / 16,
        }
        if method not in per_param:
            raise ValueError(f"quantization method {method!r} is not one of {METHODS}")
        return cls(method, per_param[method], kv)


def kv_bytes_for_dtype(kv_cache_dtype: str) -> float:
    """vLLM `--kv-cache-dtype` -> bytes per KV element ("auto"/"bfloat16"/"float16" -> 2, "fp8*" -> 1)."""
    d = kv_cache_dtype.lower()
    if d in ("auto", "bfloat16", "bf16", "float16", "fp16", "half"):
        return BF16_BYTES
    if d.startswith("fp8"):
        return 1.0
    raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}; valid: auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2")


def parse_quantization(config: dict[str, Any] | None, hf_quant: dict[str, Any] | None = None) -> QuantSpec:
    """QuantSpec from a HF `quantization_config` dict and/or a modelopt `hf_quant_config.json` dict."""
    if not config and hf_quant:
        config = _from_hf_quant(hf_quant)
    if not config:
        return QuantSpec()
    method = str(config.get("quant_method") or "").lower()
    if not method and config.get("quant_algo"):  # modelopt checkpoints that omit quant_method
        method = "modelopt"
    if method == "fp8":
        return _fp8(config)
    if method == "mxfp4":
        # vLLM's Mxfp4Config quantizes FusedMoE layers only; attention/router/embeddings stay bf16.
        return QuantSpec("mxfp4", 0.5 + 1.0 / 32, _kv_bytes(config), quantized_parts=("routed_experts",))
    if method in ("modelopt", "modelopt_fp4", "compressed-tensors"):
        return _grouped(config)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(config.get("bits", config.get("w_bit", 4)))
        group = int(config.get("group_size", config.get("q_group_size", 128)))
        if bits != 4 or group <= 0:
            raise ValueError(f"{method} with bits={bits}, group_size={group} unsupported; only 4-bit grouped")
        return QuantSpec("int4_wo", 0.5 + 2.5 / group, _kv_bytes(config), quantized_parts=_parts(config))
    raise ValueError(f"unsupported quant_method {method!r}; supported: fp8, mxfp4, modelopt, compressed-tensors, awq, gptq")


def _from_hf_quant(hf_quant: dict[str, Any]) -> dict[str, Any]:
    q = hf_quant.get("quantization", hf_quant)
    return {"quant_method": "modelopt", "quant_algo": q.get("quant_algo"), "group_size": q.get("group_size"),
            "kv_cache_scheme": q.get("kv_cache_quant_algo"), "ignore": q.get("exclude_modules", []),
            "quantized_layers": q.get("quantized_layers")}


def _fp8(config: dict[str, Any]) -> QuantSpec:
    block = config.get("weight_block_size")
    if block:
        return _fp8_block(block, _kv_bytes(config), _parts(config))
    return QuantSpec("fp8", 1.0, _kv_bytes(config), quantized_parts=_parts(config))


def _fp8_block(block: Sequence[int], kv_bytes: float, parts: tuple[str, ...]) -> QuantSpec:
    """Block-scaled fp8: one fp32 scale per block_n x block_k block of weights."""
    b0, b1 = int(block[0]), int(block[1])
    return QuantSpec("fp8_block", 1.0 + 4.0 / (b0 * b1), kv_bytes, quantized_parts=parts, weight_block_size=(b0, b1))


def _grouped(config: dict[str, Any]) -> QuantSpec:
    """modelopt (quant_algo FP8/NVFP4, MIXED_PRECISION) or compressed-tensors (config_groups.*.weights)."""
    algo = str(config.get("quant_algo") or "").upper()
    if algo == "MIXED_PRECISION":
        return _mixed(config)
    weights = {}
    for group in (config.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        break
    bits, wtype = weights.get("num_bits"), weights.get("type")
    group_size = int(weights.get("group_size") or config.get("group_size") or 16)
    kv, parts = _kv_bytes(config), _parts(config)
    if algo == "NVFP4" or (bits == 4 and wtype == "float"):
        return QuantSpec("nvfp4", 0.5 + 1.0 / 16, kv, quantized_parts=parts)
    if algo == "FP8" or (bits == 8 and wtype == "float"):
        if weights.get("strategy") == "block" and weights.get("block_structure"):
            return _fp8_block(weights["block_structure"], kv, parts)
        return QuantSpec("fp8", 1.0, kv, quantized_parts=parts)
    if bits == 4 and wtype == "int":
        zero = 0.0 if weights.get("symmetric", True) else 0.5  # packed 4-bit zero point per group
        return QuantSpec("int4_wo", 0.5 + (2.0 + zero) / group_size, kv, quantized_parts=parts)
    raise ValueError(f"unsupported {config.get('quant_method')} scheme quant_algo={algo or None} num_bits={bits} type={wtype}")


def _layer_part(name: str) -> str | None:
    """The weight group (PARTS or LM_HEAD) a checkpoint layer name belongs to, None for others
    (an MTP or vision layer: not the text model's groups)."""
    if name == LM_HEAD or name.endswith("." + LM_HEAD):
        return LM_HEAD
    if "mtp" in name.split(".")[0] or "visual" in name or "vision" in name:
        return None
    if "linear_attn" in name:
        return "linear_attention"
    if re.search(r"self_attn|\.attn\.|\.attention\.", name):
        return "attention"
    if "shared_expert" in name:
        return "shared_experts"
    if re.search(r"\.experts\b", name):
        return "routed_experts"
    if re.search(r"\.mlp\.(gate|up|down|gate_up)_proj$", name):
        return "dense_mlp"
    return None


def _mixed(config: dict[str, Any]) -> QuantSpec:
    """A modelopt MIXED_PRECISION checkpoint: ``quantized_layers`` maps each layer to its
    quant_algo (FP8, NVFP4 or W4A16_NVFP4 here); a part's layers must share one, the parts no
    layer names stay bf16. ValueError (one line) otherwise."""
    layers = config.get("quantized_layers") or {}
    if not isinstance(layers, dict) or not layers:
        raise ValueError("modelopt MIXED_PRECISION without quantized_layers: no per-layer formats to read")
    algos: dict[str, set[str]] = {}
    for name, recipe in layers.items():
        algo = str((recipe or {}).get("quant_algo") or "").upper()
        if algo not in MIXED_ALGOS:
            raise ValueError(f"MIXED_PRECISION quant_algo {algo!r} of {name} is not simulated; valid: "
                             f"{', '.join(MIXED_ALGOS)}")
        part = _layer_part(str(name))
        if part is not None:
            algos.setdefault(part, set()).add(MIXED_ALGOS[algo])
    mixed = sorted((p, sorted(m)) for p, m in algos.items() if len(m) > 1)
    if mixed:
        raise ValueError(f"MIXED_PRECISION: the {mixed[0][0]} layers use {', '.join(mixed[0][1])}; one format "
                         "per weight group is simulated")
    methods = {p: m.pop() for p, m in algos.items()}
    primary = methods.get("routed_experts") or methods.get("dense_mlp") or next(iter(methods.values()), "none")
    parts = tuple(p for p in PARTS if methods.get(p) == primary)
    others = tuple((p, m) for p, m in methods.items() if m != primary or p == LM_HEAD)
    return QuantSpec(primary, METHOD_BYTES[primary], _kv_bytes(config), quantized_parts=parts, part_methods=others)


def _kv_bytes(config: dict[str, Any]) -> float:
    scheme = config.get("kv_cache_scheme") or config.get("kv_cache_quant_algo")
    if not scheme:
        return BF16_BYTES
    if isinstance(scheme, dict):
        return 1.0 if scheme.get("num_bits") == 8 else BF16_BYTES
    return 1.0 if str(scheme).upper().startswith("FP8") else BF16_BYTES


def _parts(config: dict[str, Any]) -> tuple[str, ...]:
    """Quantized parts: PARTS minus those named by the ignore list (any layer -> the whole part).

    Module-level lists (`model.layers.0.mlp.gate` = the MoE router) do not exclude a part; the
    router is bf16 anyway.
    """
    ignore = [str(s) for s in (config.get("ignore") or config.get("modules_to_not_convert") or [])]
    excluded = set()
    for s in ignore:
        if re.search(r"self_attn|\battn\b|\battention\b", s):  # not post_attention_layernorm
            excluded.add("attention")
        if "linear_attn" in s:                                    # a Gated DeltaNet layer (Qwen3.5)
            excluded.add("linear_attention")
        if "shared_expert" in s:
            excluded.add("shared_experts")
        elif re.search(r"mlp\W*\(?\W*(gate|up|down)(_up)?(\|[a-z_]+)*\)?_proj", s) and "expert" not in s:
            excluded.add("dense_mlp")
    return tuple(p for p in PARTS if p not in excluded)
