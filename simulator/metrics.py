"""Client-side benchmark metrics, computed and printed exactly as ``vllm bench serve`` (0.33) does.

Per request (all times in seconds on the simulation clock, the schedule starting at 0):

    ttft      = first_token_s - send_s          (send = after the client semaphore)
    latency   = finish_s - send_s               (E2EL; finish = time of the last output chunk)
    itl       = gaps between consecutive output chunks (token_times_s)
    tpot      = (latency - ttft) / (output_len - 1)   only when output_len > 1
    queue     = send_s - arrival_s              (client-side semaphore wait)

Aggregates use NumPy as vLLM does: ``np.mean/median/std/percentile(values or 0) * 1000`` in ms;
ITLs are pooled over all chunks of all requests.  ``duration_s`` is vLLM's benchmark duration:
from the start of the arrival schedule to the end of the last request.  Every record counts as
a successful request (failed = 0).  The output dict has the keys of the ``--save-result`` JSON;
``generated_texts`` is left out (the simulator produces no text).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

GOODPUT_METRICS = ("ttft", "tpot", "e2el")
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")     # --percentile-metrics' names (ours reports all four by default)
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "errors")
_HEADERS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
}


@dataclass(frozen=True)
class RequestRecord:
    """What the benchmark client observes for one finished request (seconds, simulation clock).

    arrival_s: when the arrival schedule released the request.
    send_s: when the client sent it (== arrival_s unless max_concurrency held it back).
    first_token_s: time of the first output chunk.  finish_s: time of the last output chunk.
    token_times_s: time of every output chunk, first included (a chunk may carry several tokens);
        any float sequence (the simulator hands an ``array('d')``: 8 bytes a chunk at scale).
    output_len: generated tokens (usage.completion_tokens).
    prefill_replica / decode_replica / kv_transfer_s: P/D disaggregation only (-1, -1, 0 otherwise):
    the engines of each role that served the request and its KV transfer time (start to last byte).
    lora_id: the LoRA adapter it ran (``RequestSpec.lora_id``; 0 = the base model).
    image_tokens: its images' prompt tokens, which ``prompt_len`` (the text, as vllm bench serve
        counts the prompt) leaves out (``RequestSpec.image_tokens``).
    """

    request_id: str
    arrival_s: float
    send_s: float
    first_token_s: float
    finish_s: float
    prompt_len: int
    output_len: int
    token_times_s: Sequence[float]
    num_preemptions: int = 0
    num_prefix_hit_tokens: int = 0
    prefill_replica: int = -1
    decode_replica: int = -1
    kv_transfer_s: float = 0.0
    kv_transfer_start_s: float = 0.0      # P/D: when D started pulling the KV (Perfetto transfer track)
    lora_id: int = 0
    image_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.arrival_s <= self.send_s <= self.first_token_s <= self.finish_s:
            raise ValueError(
                f"request {self.request_id!r}: need arrival_s <= send_s <= first_token_s <= finish_s, got "
                f"{self.arrival_s}, {self.send_s}, {self.first_token_s}, {self.finish_s}"
            )
        times = self.token_times_s
        if not 1 <= len(times) <= self.output_len:
            raise ValueError(
                f"request {self.request_id!r}: {len(times)} token_times_s for output_len={self.output_len}; "
                "need 1..output_len"
            )
        if times[0] != self.first_token_s or times[-1] != self.finish_s or _falls(times):
            raise ValueError(
                f"request {self.request_id!r}: token_times_s must rise from first_token_s={self.first_token_s} "
                f"to finish_s={self.finish_s}"
            )


def _falls(times: Sequence[float]) -> bool:
    """Whether some time is greater than the next one (NumPy: ~256 times a record at scale)."""
    t = np.asarray(times, dtype=np.float64)
    return bool(np.count_nonzero(t[:-1] > t[1:]))


def _gaps(times: Sequence[float]) -> np.ndarray:
    """``np.diff`` of the token times (the same subtraction, without its per-call checks)."""
    t = np.asarray(times, dtype=np.float64)
    return t[1:] - t[:-1]


def _stats(
    values: Sequence[float] | np.ndarray, percentiles: Sequence[float]
) -> tuple[float, float, float, list[tuple[float, float]]]:
    """(mean, median, std, [(p, value)]) in ms, as vLLM computes them."""
    data = np.asarray(values, dtype=np.float64) if len(values) else 0  # vLLM: np.xxx(values or 0)
    return (
        float(np.mean(data) * 1000),
        float(np.median(data) * 1000),
        float(np.std(data) * 1000),
        [(p, float(np.percentile(data, p) * 1000)) for p in percentiles],
    )


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


_PEAKS_CHUNK = 4096     # requests per padded block in _peaks (4096 x ~400 chunks x 8 B = 13 MB)


def _peaks(records: Sequence[RequestRecord], gaps: Sequence[np.ndarray]) -> tuple[float, int]:
    """vLLM's peak output chunks per 1-second bucket and peak concurrent requests.

    Chunk times are rebuilt as vLLM rebuilds them (send + ttft, then running sums of the ITLs;
    ``np.cumsum`` adds sequentially like its loop), bucketed by ``int(t - first_send)``.
    """
    if not records:
        return 0.0, 0
    min_start = min(r.send_s for r in records)
    buckets = int(np.ceil(max(r.send_s + (r.finish_s - r.send_s) for r in records) - min_start)) + 1
    tokens = np.zeros(buckets)
    active = np.zeros(buckets + 1)  # difference array of requests active per second
    for lo in range(0, len(records), _PEAKS_CHUNK):
        # A chunk of requests at once: row i = [first, gap_0, gap_1, ...] zero-padded; cumsum
        # along a row adds sequentially, as the per-request cumsum does (same floats).
        chunk, chunk_gaps = records[lo:lo + _PEAKS_CHUNK], gaps[lo:lo + _PEAKS_CHUNK]
        lens = np.fromiter((len(g) + 1 for g in chunk_gaps), np.int64, len(chunk_gaps))
        rows = np.zeros((len(chunk), int(lens.max())))
        for i, (r, g) in enumerate(zip(chunk, chunk_gaps)):
            rows[i, 0] = r.send_s + (r.first_token_s - r.send_s)
            rows[i, 1:len(g) + 1] = g
            active[int(r.send_s - min_start)] += 1
            active[int(r.send_s + (r.finish_s - r.send_s) - min_start) + 1] -= 1
        idx = (np.cumsum(rows, axis=1) - min_start).astype(np.int64)
        keep = (np.arange(rows.shape[1]) < lens[:, None]) & (idx >= 0) & (idx < buckets)
        tokens += np.bincount(idx[keep], minlength=buckets)
    return float(np.max(tokens)), int(np.max(np.cumsum(active)[:buckets]))


def benchmark_duration_s(records: Sequence[RequestRecord], schedule_start_s: float = 0.0) -> float:
    """vLLM's benchmark duration: from the start of the arrival schedule to the last finish."""
    if not records:
        raise ValueError("benchmark_duration_s needs at least one record")
    return max(r.finish_s for r in records) - schedule_start_s


def summarize(
    records: Sequence[RequestRecord],
    duration_s: float,
    selected_percentiles: Sequence[float] = (99,),
    *,
    selected_percentile_metrics: Sequence[str] = PERCENTILE_METRICS,
    goodput: Mapping[str, float] | None = None,
    max_concurrency: int | None = None,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    model_id: str = "",
    backend: str = "vllm",
    label: str | None = None,
    date: str | None = None,
    num_prompts: int | None = None,
    detailed: bool = True,
) -> dict[str, Any]:
    """The ``--save-result`` dict of ``vllm bench serve`` for ``records`` (in request order).

    duration_s: see :func:`benchmark_duration_s`.
    selected_percentile_metrics: vLLM's ``--percentile-metrics`` (its default omits "e2el").
    max_concurrency / request_rate: as given to the client; they add vLLM's client-queue metrics.
    model_id, backend, label, date, num_prompts, burstiness: the run-description keys of the JSON.
    goodput: SLOs in ms by metric ("ttft", "tpot", "e2el"), as ``--goodput ttft:500``.
    detailed: keep the per-request arrays (``--save-detailed``); without it vLLM drops
    input_lens, output_lens, start_times, ttfts, itls and errors (latencies and queue_times stay).
    """
    if not duration_s > 0:
        raise ValueError(f"duration_s={duration_s} is invalid; need > 0")
    unknown = [m for m in selected_percentile_metrics if m not in PERCENTILE_METRICS]
    if unknown:
        raise ValueError(f"selected_percentile_metrics {unknown} are invalid; valid: ttft, tpot, itl, e2el")
    goodput = dict(goodput or {})
    for name, slo_ms in goodput.items():
        if name not in GOODPUT_METRICS or slo_ms < 0:
            raise ValueError(f"goodput {name}:{slo_ms} is invalid; names {', '.join(GOODPUT_METRICS)}, values >= 0 ms")
    ttfts = [r.first_token_s - r.send_s for r in records]
    e2els = [r.finish_s - r.send_s for r in records]
    gaps = [_gaps(r.token_times_s) for r in records]
    tpots, all_tpots = [], []
    for r, ttft, e2el in zip(records, ttfts, e2els):
        tpot = 0.0
        if r.output_len > 1:
            tpot = (e2el - ttft) / (r.output_len - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
    good = 0
    if goodput:
        per_metric = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
        names = [n for n in GOODPUT_METRICS if n in goodput]
        for i in range(len(records)):
            good += all(goodput[n] / 1000 >= per_metric[n][i] for n in names)
    completed = len(records)
    total_input = sum(r.prompt_len for r in records)
    total_output = sum(r.output_len for r in records)
    peak_tokens, peak_concurrent = _peaks(records, gaps)
    queue_times = [r.send_s - r.arrival_s for r in records]
    result: dict[str, Any] = {
        "date": date,
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": completed if num_prompts is None else num_prompts,
        "request_rate": request_rate if request_rate < math.inf else "inf",
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "duration": duration_s,
        "completed": completed,
        "failed": 0,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration_s,
        "request_goodput": good / duration_s if goodput else None,
        "output_throughput": total_output / duration_s,
        "total_token_throughput": (total_input + total_output) / duration_s,
        "input_lens": [r.prompt_len for r in records],
        "output_lens": [r.output_len for r in records],
        "ttfts": ttfts,
        "itls": None,                   # filled last (below): the largest value at scale
        "latencies": e2els,
        "start_times": [r.send_s for r in records],
        "queue_times": queue_times,
        "errors": ["" for _ in records],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_concurrent,
        "rtfx": 0.0,
    }
    pooled_itls = np.concatenate(gaps) if gaps else np.zeros(0)
    series = {"ttft": ttfts, "tpot": tpots, "itl": pooled_itls, "e2el": e2els}
    metrics = [m for m in PERCENTILE_METRICS if m in selected_percentile_metrics]
    extra: dict[str, list[float]] = {}
    if max_concurrency is not None:
        extra["client_queue_time"] = queue_times
        if request_rate != math.inf:
            extra["e2el_including_client_queue"] = [e + q for e, q in zip(e2els, queue_times)]
    for name, values in [(m, series[m]) for m in metrics] + list(extra.items()):
        mean, median, std, pcts = _stats(values, selected_percentiles)
        result[f"mean_{name}_ms"] = mean
        result[f"median_{name}_ms"] = median
        result[f"std_{name}_ms"] = std
        for p, value in pcts:
            result[f"p{_p_word(p)}_{name}_ms"] = value
    del series, pooled_itls             # free the pooled ITLs before the per-request lists exist
    if detailed:
        itls = result["itls"] = []
        for i, g in enumerate(gaps):        # drop each gap array once it is a list
            itls.append(g.tolist())
            gaps[i] = None
    else:
        for key in DETAILED_KEYS:
            result.pop(key)
    return result


def _line(label: str, value: Any, fmt: str = "") -> str:
    return "{:<40} {:<10{}}".format(label, value, fmt)


def format_summary(summary: Mapping[str, Any]) -> str:
    """The result block ``vllm bench serve`` prints, rebuilt from a :func:`summarize` dict."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_line("Successful requests:", summary["completed"]))
    lines.append(_line("Failed requests:", summary["failed"]))
    if summary.get("max_concurrency") is not None:
        lines.append(_line("Maximum request concurrency:", summary["max_concurrency"]))
    if summary.get("request_rate", "inf") != "inf":
        lines.append(_line("Request rate configured (RPS):", summary["request_rate"], ".2f"))
    lines.append(_line("Benchmark duration (s):", summary["duration"], ".2f"))
    lines.append(_line("Total input tokens:", summary["total_input_tokens"]))
    lines.append(_line("Total generated tokens:", summary["total_output_tokens"]))
    lines.append(_line("Request throughput (req/s):", summary["request_throughput"], ".2f"))
    if summary.get("request_goodput") is not None:
        lines.append(_line("Request goodput (req/s):", summary["request_goodput"], ".2f"))
    lines.append(_line("Output token throughput (tok/s):", summary["output_throughput"], ".2f"))
    lines.append(_line("Peak output token throughput (tok/s):", summary["max_output_tokens_per_s"], ".2f"))
    lines.append(_line("Peak concurrent requests:", summary["max_concurrent_requests"], ".2f"))
    if summary.get("rtfx", 0.0) > 0.0:
        lines.append(_line("RTFx (Inverse Real-Time Factor):", summary["rtfx"], ".2f"))
    lines.append(_line("Total token throughput (tok/s):", summary["total_token_throughput"], ".2f"))
    for name, (short, header) in _HEADERS.items():
        if f"mean_{name}_ms" not in summary:
            continue
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_line(f"Mean {short} (ms):", summary[f"mean_{name}_ms"], ".2f"))
        lines.append(_line(f"Median {short} (ms):", summary[f"median_{name}_ms"], ".2f"))
        prefix, suffix = "p", f"_{name}_ms"
        for key, value in summary.items():
            word = key[len(prefix) : -len(suffix)] if key.startswith(prefix) and key.endswith(suffix) else ""
            if word and word.replace(".", "", 1).isdigit():
                lines.append(_line(f"P{word} {short} (ms):", value, ".2f"))
    lines.append("=" * 50)
    return "\n".join(lines)


@dataclass(frozen=True)
class SessionRecord:
    """A finished multi-round session (``simulator.workloads.sessions``; seconds, simulation clock):
    its arrival, the first token of its final round (the first the user sees: the answer-visible
    TTFT is ``answer_first_token_s - arrival_s``), its finish, its rounds and the output tokens of
    its hidden rounds (all but the last)."""

    session_id: str
    arrival_s: float
    answer_first_token_s: float
    finish_s: float
    num_rounds: int
    hidden_tokens: int


def session_summary(records: Sequence[SessionRecord], num_sessions: int, duration_s: float) -> dict[str, float]:
    """Summary keys of multi-round sessions: completed and failed sessions (a round that failed ends
    its session), the answer-visible TTFT (session arrival to its final round's first token: mean,
    median, p99, ms), the session's end-to-end latency (mean, ms), rounds per session and the hidden
    planning throughput (output tokens of the hidden rounds per second of the run)."""
    attft = np.array([r.answer_first_token_s - r.arrival_s for r in records]) * 1e3
    e2e = np.array([r.finish_s - r.arrival_s for r in records]) * 1e3
    hidden = sum(r.hidden_tokens for r in records)
    return {"sessions_completed": len(records), "sessions_failed": num_sessions - len(records),
            "mean_attft_ms": float(attft.mean()) if len(records) else 0.0,
            "median_attft_ms": float(np.median(attft)) if len(records) else 0.0,
            "p99_attft_ms": float(np.percentile(attft, 99)) if len(records) else 0.0,
            "mean_session_e2el_ms": float(e2e.mean()) if len(records) else 0.0,
            "mean_rounds_per_session": sum(r.num_rounds for r in records) / len(records) if records else 0.0,
            "hidden_planning_tokens": hidden,
            "hidden_planning_throughput": hidden / duration_s if duration_s > 0 else 0.0}
