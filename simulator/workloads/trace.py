"""Replay a request trace from JSONL, CSV or Parquet.

Columns (one row per request):

    arrival_time_s     float >= 0, seconds from the start of the schedule      (required)
    output_len         int >= 1                                               (required)
    prompt_len         int >= 1            } at least one of the two; when both are given
    prompt_token_ids   list of int >= 0    } they must agree.  CSV: a JSON list "[1, 2, 3]"
                                             or space-separated ids "1 2 3".
    request_id         str, unique (default: the row index)                   (optional)
    priority           int (default 0; lower runs first under priority scheduling)  (optional)
    lora               str, the LoRA adapter the request runs (the OpenAI request's model name;
                       empty = the base model): adapters are numbered 1, 2, ... in the order
                       they first appear in the file (vLLM's lora_int_id)   (optional)
    images             list of [height, width] or [height, width, id]: the images the request
                       carries after its prompt (pixels; ``simulator.multimodal``), an id naming
                       the image's content (requests with the same id share its encoder output
                       and cached blocks; default: unique). CSV: as JSON text   (optional)

A ``.json`` file may instead hold one JSON array of such objects.  Like vLLM's ``timed_trace``
the first ``num_prompts`` rows (file order) are used; the result is sorted by arrival time
(stable).  Rows are numbered from 0 in error messages.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from frontier.text_file import read_text
from simulator.request import RequestSpec

REQUIRED = ("arrival_time_s", "output_len")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        text = read_text(path, "trace file")
        if suffix == ".json" and text.lstrip().startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not a valid JSON array ({e.msg} at line {e.lineno})") from None
        rows = []
        for n, line in enumerate(io.StringIO(text, newline=None)):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {n + 1} is not valid JSON ({e.msg})") from None
        return rows
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(read_text(path, "trace file"), newline=""))
        rows = []
        for n, row in enumerate(reader):
            if None in row:     # fields past the header's: DictReader files them under None
                raise ValueError(f"trace row {n}: {len(reader.fieldnames) + len(row[None])} fields, the header "
                                 f"has {len(reader.fieldnames)} (quote a field that holds a comma)")
            rows.append({k: v for k, v in row.items() if v not in ("", None)})
        return rows
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise ValueError(f"trace file {str(path)!r} has suffix {suffix!r}; valid: .jsonl, .json, .csv, .parquet")


def read_rows(path: str, what: str) -> list[dict[str, Any]]:
    """The rows of the file at ``path`` (``_read_rows``), refused in one line when it does not
    exist or holds none (``what``: "trace file", "session trace" for the messages)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {path!r} does not exist")
    rows = _read_rows(p)
    if not rows:
        raise ValueError(f"{what} {path!r} has no rows")
    return rows


def as_int(value: Any, name: str, row: int, minimum: int) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"trace row {row}: {name}={value!r} is not a number") from None
    if not f.is_integer() or f < minimum:
        raise ValueError(f"trace row {row}: {name}={value!r} is invalid; need an integer >= {minimum}")
    return int(f)


def arrival_s(value: Any, where: str) -> float:
    """A row's ``arrival_time_s`` (``where``: "trace row 3" for the messages): a finite number >= 0."""
    try:
        arrival = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: arrival_time_s={value!r} is not a number") from None
    if not math.isfinite(arrival) or arrival < 0:
        raise ValueError(f"{where}: arrival_time_s={arrival} is invalid; need a finite value >= 0")
    return arrival


def _token_ids(value: Any, row: int) -> tuple[int, ...]:
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else [int(t) for t in text.split()]
        except ValueError:
            raise ValueError(f"trace row {row}: prompt_token_ids={value!r} is not a list of ints") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"trace row {row}: prompt_token_ids={value!r} must be a non-empty list of ints")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        raise ValueError(f"trace row {row}: prompt_token_ids holds a value that is not an int >= 0")
    return tuple(value)


def _parse_row(raw: dict[str, Any], row: int, adapters: dict[str, int]) -> RequestSpec:
    if not isinstance(raw, dict):
        raise ValueError(f"trace row {row}: a JSON {type(raw).__name__}, not an object with arrival_time_s, "
                         "output_len and prompt_len or prompt_token_ids")
    missing = [c for c in REQUIRED if raw.get(c) is None]
    if raw.get("prompt_len") is None and raw.get("prompt_token_ids") is None:
        missing.append("prompt_len|prompt_token_ids")
    if missing:
        raise ValueError(f"trace row {row}: missing column(s) {', '.join(missing)}")
    arrival = arrival_s(raw["arrival_time_s"], f"trace row {row}")
    output_len = as_int(raw["output_len"], "output_len", row, 1)
    ids = None if raw.get("prompt_token_ids") is None else _token_ids(raw["prompt_token_ids"], row)
    if raw.get("prompt_len") is not None:
        prompt_len = as_int(raw["prompt_len"], "prompt_len", row, 1)
        if ids is not None and len(ids) != prompt_len:
            raise ValueError(f"trace row {row}: prompt_len={prompt_len} but prompt_token_ids has {len(ids)} ids")
    else:
        prompt_len = len(ids)
    priority = 0 if raw.get("priority") is None else as_int(raw["priority"], "priority", row, -(2**63))
    request_id = str(raw["request_id"]) if raw.get("request_id") is not None else str(row)
    lora = raw.get("lora")
    if lora is not None and not isinstance(lora, str):
        raise ValueError(f"trace row {row}: lora={lora!r} is not an adapter name")
    lora_id = adapters.setdefault(lora, len(adapters) + 1) if lora else 0
    images, image_ids = _images(raw.get("images"), row)
    return RequestSpec(request_id, arrival, prompt_len, output_len, priority=priority, prompt_token_ids=ids,
                       lora_id=lora_id, images=images, image_ids=image_ids)


def _images(value: Any, row: int) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    """A row's ``images``: ((height, width), ...) and their ids ("" = unique), or ((), ())."""
    if value is None:
        return (), ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"trace row {row}: images={value!r} is not JSON (give [[height, width], ...])") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"trace row {row}: images={value!r} must be a list of [height, width] or "
                         "[height, width, id]")
    sizes, ids = [], []
    for item in value:
        ok = isinstance(item, (list, tuple)) and len(item) in (2, 3) and all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in item[:2])
        if not ok or (len(item) == 3 and not (isinstance(item[2], str) and item[2])):
            raise ValueError(f"trace row {row}: image {item!r} is not [height, width] or [height, width, id] "
                             "(pixel counts >= 1, a non-empty id)")
        sizes.append((item[0], item[1]))
        ids.append(item[2] if len(item) == 3 else "")
    return tuple(sizes), (tuple(ids) if any(ids) else ())


def load_trace(path: str, num_requests: int) -> list[RequestSpec]:
    """The first ``num_requests`` rows of the trace at ``path``, sorted by arrival time."""
    rows = read_rows(path, "trace file")
    adapters: dict[str, int] = {}       # LoRA adapter name -> id, by first appearance
    requests = [_parse_row(raw, n, adapters) for n, raw in enumerate(rows[:num_requests])]
    seen: dict[str, int] = {}
    for n, r in enumerate(requests):
        if r.request_id in seen:
            raise ValueError(f"trace row {n}: request_id={r.request_id!r} repeats row {seen[r.request_id]}")
        seen[r.request_id] = n
    return sorted(requests, key=lambda r: r.arrival_s)
