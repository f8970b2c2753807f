"""summarize / format_summary against hand-computed vLLM 0.33 `vllm bench serve` numbers."""

import pytest

from simulator.metrics import RequestRecord, format_summary, summarize

RECORDS = (
    # ttft .1, e2el .4, itl [.1, .2], tpot .3/2 = .15
    RequestRecord("0", 0.0, 0.0, 0.1, 0.4, 10, 3, (0.1, 0.2, 0.4)),
    # held 0.5 s by the client semaphore; one token: ttft .5, e2el .5, no itl, no tpot
    RequestRecord("1", 0.5, 1.0, 1.5, 1.5, 20, 1, (1.5,)),
    # 4 tokens in 3 chunks: ttft .2, e2el 1.0, itl [.1, .7], tpot .8/3
    RequestRecord("2", 1.0, 1.0, 1.2, 2.0, 30, 4, (1.2, 1.3, 2.0), num_preemptions=1),
)

VLLM_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p99_e2el_ms",
]


def test_summary_numbers_for_three_records():
    s = summarize(RECORDS, 2.0, goodput={"ttft": 300, "tpot": 200})
    assert list(s) == VLLM_KEYS
    assert (s["completed"], s["failed"], s["total_input_tokens"], s["total_output_tokens"]) == (3, 0, 60, 8)
    assert (s["request_throughput"], s["output_throughput"], s["total_token_throughput"]) == (1.5, 4.0, 34.0)
    assert s["request_goodput"] == 0.5  # only request 0 meets ttft <= 300 ms and tpot <= 200 ms
    approx = pytest.approx
    assert s["mean_ttft_ms"] == approx(800 / 3) and s["median_ttft_ms"] == approx(200)
    assert s["std_ttft_ms"] == approx(169.967317, rel=1e-6) and s["p99_ttft_ms"] == approx(494)
    assert s["mean_tpot_ms"] == approx(625 / 3) and s["p99_tpot_ms"] == approx(265.5)
    assert s["mean_itl_ms"] == approx(275) and s["median_itl_ms"] == approx(150) and s["p99_itl_ms"] == approx(685)
    assert s["mean_e2el_ms"] == approx(1900 / 3) and s["median_e2el_ms"] == approx(500) and s["p99_e2el_ms"] == approx(990)
    assert s["itls"] == [approx([0.1, 0.2]), [], approx([0.1, 0.7])]
    assert s["latencies"] == approx([0.4, 0.5, 1.0]) and s["ttfts"] == approx([0.1, 0.5, 0.2])
    assert s["start_times"] == [0.0, 1.0, 1.0] and s["queue_times"] == [0.0, 0.5, 0.0]
    # chunks per 1-s bucket from the first send: [3, 3, 1]; requests active per second: [1, 2, 1]
    assert (s["max_output_tokens_per_s"], s["max_concurrent_requests"]) == (3.0, 2)
    assert s["request_rate"] == "inf" and s["errors"] == ["", "", ""] and s["rtfx"] == 0.0


def test_client_queue_metrics_percentile_names_and_not_detailed():
    s = summarize(
        RECORDS, 2.0, (50, 99.9), selected_percentile_metrics=("ttft",), max_concurrency=2, request_rate=2.0, detailed=False
    )
    assert s["request_goodput"] is None and s["request_rate"] == 2.0 and s["max_concurrency"] == 2
    assert "p50_ttft_ms" in s and "p99.9_ttft_ms" in s and "mean_tpot_ms" not in s
    assert s["mean_client_queue_time_ms"] == pytest.approx(500 / 3)
    assert s["mean_e2el_including_client_queue_ms"] == pytest.approx(800)
    for key in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "errors"):
        assert key not in s
    assert "latencies" in s and "queue_times" in s  # vLLM keeps these without --save-detailed


def test_empty_run_reports_zeros_like_vllm():
    s = summarize([], 1.0)
    assert (s["completed"], s["mean_ttft_ms"], s["p99_itl_ms"], s["max_concurrent_requests"]) == (0, 0.0, 0.0, 0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="duration_s=0 is invalid"):
        summarize(RECORDS, 0)
    with pytest.raises(ValueError, match="goodput itl:5 is invalid"):
        summarize(RECORDS, 1.0, goodput={"itl": 5})
    with pytest.raises(ValueError, match="need arrival_s <= send_s <= first_token_s <= finish_s"):
        RequestRecord("x", 1.0, 0.5, 2.0, 3.0, 1, 1, (2.0,))
    with pytest.raises(ValueError, match="token_times_s must rise from first_token_s=2.0 to finish_s=3.0"):
        RequestRecord("x", 1.0, 1.0, 2.0, 3.0, 1, 2, (2.0, 2.5))
    with pytest.raises(ValueError, match="3 token_times_s for output_len=2"):
        RequestRecord("x", 1.0, 1.0, 2.0, 3.0, 1, 2, (2.0, 2.5, 3.0))


EXPECTED_BLOCK = """\
============ Serving Benchmark Result ============
Successful requests:                     3         
Failed requests:                         0         
Maximum request concurrency:             2         
Request rate configured (RPS):           2.00      
Benchmark duration (s):                  2.00      
Total input tokens:                      60        
Total generated tokens:                  8         
Request throughput (req/s):              1.50      
Request goodput (req/s):                 0.50      
Output token throughput (tok/s):         4.00      
Peak output token throughput (tok/s):    3.00      
Peak concurrent requests:                2.00      
Total token throughput (tok/s):          34.00     
---------------Time to First Token----------------
Mean TTFT (ms):                          266.67    
Median TTFT (ms):                        200.00    
P99 TTFT (ms):                           494.00    
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          208.33    
Median TPOT (ms):                        208.33    
P99 TPOT (ms):                           265.50    
---------------Inter-token Latency----------------
Mean ITL (ms):                           275.00    
Median ITL (ms):                         150.00    
P99 ITL (ms):                            685.00    
----------------End-to-end Latency----------------
Mean E2EL (ms):                          633.33    
Median E2EL (ms):                        500.00    
P99 E2EL (ms):                           990.00    
---------------Client-side Queueing---------------
Mean Client Queue Time (ms):             166.67    
Median Client Queue Time (ms):           0.00      
P99 Client Queue Time (ms):              490.00    
--------Queue-inclusive End-to-end Latency--------
Mean E2EL incl. Client Queue (ms):       800.00    
Median E2EL incl. Client Queue (ms):     1000.00   
P99 E2EL incl. Client Queue (ms):        1000.00   
=================================================="""


def test_format_summary_matches_vllm_block():
    s = summarize(RECORDS, 2.0, goodput={"ttft": 300, "tpot": 200}, max_concurrency=2, request_rate=2.0)
    assert format_summary(s) == EXPECTED_BLOCK


def test_benchmark_duration_is_last_finish_from_schedule_start():
    from simulator.metrics import benchmark_duration_s

    assert benchmark_duration_s(RECORDS) == 2.0
    assert summarize(RECORDS, benchmark_duration_s(RECORDS), num_prompts=5)["num_prompts"] == 5


def _vllm_reference(records, dur_s, percentiles):
    """vllm/benchmarks/serve.py calculate_metrics, transcribed (outputs rebuilt from records)."""
    import numpy as np

    ttfts, e2els, tpots, itls = [], [], [], []
    outs = []
    for r in records:
        itl = [b - a for a, b in zip(r.token_times_s, r.token_times_s[1:])]
        ttft, latency = r.first_token_s - r.send_s, r.finish_s - r.send_s
        if r.output_len > 1:
            tpots.append((latency - ttft) / (r.output_len - 1))
        itls += itl
        ttfts.append(ttft)
        e2els.append(latency)
        outs.append((r.send_s, ttft, itl, latency))
    min_start_time = min(o[0] for o in outs)
    max_end_time = max(o[0] + o[3] for o in outs)
    duration_seconds = int(np.ceil(max_end_time - min_start_time)) + 1
    tokens_per_second = np.zeros(duration_seconds)
    concurrent = np.zeros(duration_seconds)
    for start, ttft, itl, latency in outs:
        token_times = [start + ttft]
        current_time = token_times[0]
        for itl_value in itl:
            current_time += itl_value
            token_times.append(current_time)
        for token_time in token_times:
            second_bucket = int(token_time - min_start_time)
            if 0 <= second_bucket < duration_seconds:
                tokens_per_second[second_bucket] += 1
        for second in range(int(start - min_start_time), int((start + latency) - min_start_time) + 1):
            concurrent[second] += 1
    ref = {"max_output_tokens_per_s": float(np.max(tokens_per_second)), "max_concurrent_requests": int(np.max(concurrent))}
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        ref[f"mean_{name}_ms"] = np.mean(values or 0) * 1000
        ref[f"median_{name}_ms"] = np.median(values or 0) * 1000
        ref[f"std_{name}_ms"] = np.std(values or 0) * 1000
        for p in percentiles:
            ref[f"p{str(int(p)) if int(p) == p else str(p)}_{name}_ms"] = np.percentile(values or 0, p) * 1000
    return ref


def test_matches_transcribed_vllm_calculate_metrics_exactly():
    import random

    rng = random.Random(1)
    records = []
    for i in range(60):
        arrival = rng.uniform(0, 20)
        send = arrival + rng.choice([0.0, rng.uniform(0, 2)])
        n_out = rng.randint(1, 40)
        chunks = rng.randint(1, n_out)
        t = send + rng.uniform(0.01, 1.5)
        times = [t]
        for _ in range(chunks - 1):
            t += rng.uniform(0.005, 0.2)
            times.append(t)
        records.append(RequestRecord(str(i), arrival, send, times[0], times[-1], rng.randint(1, 999), n_out, tuple(times)))
    s = summarize(records, max(r.finish_s for r in records), (50, 90, 99, 99.9))
    ref = _vllm_reference(records, None, (50, 90, 99, 99.9))
    for key, value in ref.items():
        assert s[key] == value, key


def test_unknown_percentile_metric_is_rejected():
    with pytest.raises(ValueError, match=r"selected_percentile_metrics \['ttfb'\] are invalid"):
        summarize(RECORDS, 2.0, selected_percentile_metrics=("ttfb",))
