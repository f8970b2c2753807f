"""Request arrival times exactly as ``vllm bench serve`` (0.33) ``get_request`` computes them.

vLLM seeds the *global* legacy NumPy generator once (``np.random.seed(seed)`` in
``main_async``) and then draws one gamma gap per request, in request order, inside
``get_request``.  The random and ShareGPT datasets never touch that global generator
(RandomDataset uses its own ``default_rng``, ShareGPT uses Python's ``random``), so the
gaps are the first ``n`` draws of ``RandomState(seed)``.  We use a private
``RandomState(seed)``, which produces the same stream as ``np.random.seed(seed)``.

    gap_i   ~ Gamma(shape=burstiness, scale=1 / (rate * burstiness))   (i = 0..n-1)
    t_i     = gap_0 + ... + gap_i            (the first request also waits its own gap)
    t_i    *= (n / rate) / t_{n-1}           (rescale: the last arrival is exactly at n/rate)

``rate == inf`` sends every request at t = 0; ``burstiness == inf`` gives the constant
gap 1/rate.  Ramp-up strategies are not modelled.
"""

from __future__ import annotations

import math

import numpy as np


def arrival_times_s(num_requests: int, request_rate: float, burstiness: float, seed: int) -> list[float]:
    """Arrival times (seconds from the start of the schedule) of ``num_requests`` requests.

    Mirrors ``vllm.benchmarks.serve.get_request`` without ramp-up, including its float
    arithmetic (running sums, then one multiplication by the normalisation factor).
    """
    if num_requests < 1:
        raise ValueError(f"num_requests={num_requests} is invalid; need at least 1")
    if not request_rate > 0:
        raise ValueError(f"request_rate={request_rate} is invalid; must be > 0 (inf = all at t=0)")
    if not burstiness > 0:
        raise ValueError(f"burstiness={burstiness} is invalid; must be > 0")
    rng = np.random.RandomState(seed)
    delay_ts: list[float] = []
    for _ in range(num_requests):
        if request_rate == math.inf:
            delay_ts.append(0)
        elif burstiness == math.inf:
            delay_ts.append(1.0 / request_rate)
        else:
            theta = 1.0 / (request_rate * burstiness)
            delay_ts.append(rng.gamma(shape=burstiness, scale=theta))
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    if delay_ts[-1] != 0:
        target_total_delay_s = num_requests / request_rate
        normalize_factor = target_total_delay_s / delay_ts[-1]
        delay_ts = [delay * normalize_factor for delay in delay_ts]
    return [float(d) for d in delay_ts]
