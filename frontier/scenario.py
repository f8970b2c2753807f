"""Strict loading of scenario files (YAML): the same settings as the CLI flags.

A scenario is a flat mapping whose keys are flag names, written with dashes
as on the command line (``max-num-seqs: 256``) or with underscores
(``max_num_seqs: 256``). An unknown key is an error that names it and lists
the valid ones; so is a file that is not a mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import yaml

from frontier.text_file import read_text


def load_scenario(path: str | Path, valid_keys: Iterable[str]) -> dict[str, Any]:
    """Read ``path`` and return ``{underscored_key: value}``; refuse unknown keys."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"scenario file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(read_text(p, "scenario file"))
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise ValueError(f"scenario file {str(p)!r} is not valid YAML: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"scenario file {str(p)!r} must hold a mapping of flag names to values, "
                         f"not a {type(data).__name__}")
    valid = set(valid_keys)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in valid:
            shown = ", ".join(sorted(k.replace("_", "-") for k in valid))
            raise ValueError(f"scenario file {str(p)!r}: unknown key {key!r}; valid keys: {shown}")
        out[name] = value
    return out
