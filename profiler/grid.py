"""`SweepGrid`: the shapes a sweep measures, per family, from defaults or a YAML/JSON grid file.

Layouts (TP / EP sizes) and families come from the command line; this file holds the shapes.
Defaults are small on CPU (CI) and serving-sized on CUDA.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from frontier.text_file import read_text

DISTRIBUTIONS = ("balanced", "skewed")


@dataclass(frozen=True)
class SweepGrid:
    """Shapes per family. Token counts are per rank (the tokens of one forward step).

    attention: prefill batches = (requests x total new tokens), lengths drawn around the mean;
    decode batches = (batch size x mean context), contexts drawn in [mean/4, 7*mean/4];
    mixed batches = each prefill total combined with each decode batch size at the first context.
    """

    linear_tokens: tuple[int, ...] = (1, 8, 64)
    attention_prefill_requests: tuple[int, ...] = (1, 2)
    attention_prefill_tokens: tuple[int, ...] = (16, 64)
    attention_decode_batch: tuple[int, ...] = (1, 4)
    attention_decode_ctx: tuple[int, ...] = (32,)
    attention_mixed: bool = True
    block_size: int = 16
    moe_tokens: tuple[int, ...] = (4, 32)
    moe_distributions: tuple[str, ...] = DISTRIBUTIONS
    elementwise_tokens: tuple[int, ...] = (8, 64)
    memory_max_num_batched_tokens: tuple[int, ...] = (64,)
    chunk_size: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        # checked by each field's declared type: a grid file's values arrive untyped (a word or a
        # single number where a list belongs ended in a TypeError traceback)
        def whole(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)
        for f in fields(self):
            value, kind = getattr(self, f.name), str(f.type)
            if kind == "tuple[int, ...]":
                if not isinstance(value, tuple) or not value or any(not whole(v) or v <= 0 for v in value):
                    shown = list(value) if isinstance(value, tuple) else value
                    raise ValueError(f"grid {f.name}={shown!r} must be a non-empty list of positive integers")
            elif kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"grid {f.name}={value!r} must be true or false")
            elif kind == "int" and (not whole(value) or value < (0 if f.name == "seed" else 1)):
                raise ValueError(f"grid {f.name}={value!r} must be an integer >= {0 if f.name == 'seed' else 1}")
        if not isinstance(self.moe_distributions, tuple) or not self.moe_distributions or any(
                d not in DISTRIBUTIONS for d in self.moe_distributions):
            shown = list(self.moe_distributions) if isinstance(self.moe_distributions, tuple) else self.moe_distributions
            raise ValueError(f"grid moe_distributions={shown!r}; valid: a list of {', '.join(DISTRIBUTIONS)}")

    @classmethod
    def default(cls, device: str) -> SweepGrid:
        if not device.startswith("cuda"):
            return cls()
        return cls(  # pragma: no cover - exercised by scripts/profile_h200.sh
            linear_tokens=(1, 8, 32, 128, 512, 2048, 8192),
            attention_prefill_requests=(1, 4, 16),
            attention_prefill_tokens=(512, 2048, 8192),
            attention_decode_batch=(1, 16, 64, 256),
            attention_decode_ctx=(512, 4096),
            moe_tokens=(1, 16, 128, 1024, 8192),
            elementwise_tokens=(1, 32, 512, 8192),
            memory_max_num_batched_tokens=(8192,),
            chunk_size=16,
        )

    @classmethod
    def from_file(cls, path: Path, device: str) -> SweepGrid:
        """Device defaults overridden by the keys of a YAML/JSON mapping; unknown keys refused."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"grid file {path} does not exist")
        text = read_text(path, "grid file")
        try:
            data: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            first = str(exc).splitlines()[0]
            raise ValueError(f"grid file {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                             f"{first}") from None
        if not isinstance(data, dict):
            raise ValueError(f"grid file {path} must hold a mapping of grid keys")
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ValueError(f"grid file {path} has unknown keys {unknown}; valid: {', '.join(valid)}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return replace(cls.default(device), **values)
