"""Reading a user-given text or JSON file (scenario, trace, ShareGPT, routing weights, model config)
with one-line errors.

A binary file handed where text is expected used to surface as Python's bare
"'utf-8' codec can't decode byte 0xcb in position 0", naming neither the file nor the flag.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of ``path`` as stored (line endings untranslated, as ``open(newline="")``
    reads them); ValueError naming ``what`` it is (e.g. "trace file") and the path when it is not
    UTF-8 text (the offset is that of the first byte that is not)."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {str(path)!r} is not a UTF-8 text file (byte {exc.start})") from None


def read_json(path: str | Path, what: str) -> Any:
    """The parsed JSON of ``path`` (``read_text``); ValueError naming ``what`` and the path, with
    the decoder's reason and position, when it is not valid JSON."""
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno} "
                         f"column {exc.colno}") from None
