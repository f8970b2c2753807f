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
gap 1/rate.

Ramp-up (``--ramp-up-strategy linear|exponential --ramp-up-start-rps S --ramp-up-end-rps E``,
vLLM's ``_get_current_request_rate``): request i of n draws its gap at the rate

    linear:       S + (E - S) * p          p = i / max(n - 1, 1)
    exponential:  S * (E / S) ** p

and the sums are not rescaled (vLLM rescales only without a ramp-up).
"""

from __future__ import annotations

import math

import numpy as np


RAMP_UP_STRATEGIES = ("linear", "exponential")


def ramp_up_rate(strategy: str, start_rps: float, end_rps: float, index: int, total: int) -> float:
    """vLLM's ``_get_current_request_rate`` for request ``index`` of ``total`` under a ramp-up."""
    progress = index / max(total - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    return start_rps * ((end_rps / start_rps) ** progress)


def arrival_times_s(num_requests: int, request_rate: float, burstiness: float, seed: int,
                    ramp_up: tuple[str, float, float] | None = None) -> list[float]:
    """Arrival times (seconds from the start of the schedule) of ``num_requests`` requests.

    Mirrors ``vllm.benchmarks.serve.get_request``, including its float arithmetic (running sums,
    then one multiplication by the normalisation factor). ``ramp_up``: (strategy, start rps, end
    rps), replacing ``request_rate`` (module docstring).
    """
    if num_requests < 1:
        raise ValueError(f"num_requests={num_requests} is invalid; need at least 1")
    if not request_rate > 0:
        raise ValueError(f"request_rate={request_rate} is invalid; must be > 0 (inf = all at t=0)")
    if not burstiness > 0:
        raise ValueError(f"burstiness={burstiness} is invalid; must be > 0")
    if ramp_up is not None and ramp_up[0] not in RAMP_UP_STRATEGIES:
        raise ValueError(f"ramp-up strategy {ramp_up[0]!r} is invalid; valid: {', '.join(RAMP_UP_STRATEGIES)}")
    rng = np.random.RandomState(seed)
    delay_ts: list[float] = []
    for i in range(num_requests):
        if ramp_up is not None:
            request_rate = ramp_up_rate(*ramp_up, i, num_requests)
            if not request_rate > 0:
                raise ValueError(f"ramp-up rate {request_rate} for request {i}; vLLM asserts a positive rate "
                                 "(a linear ramp-up from 0 RPS fails there)")
        if request_rate == math.inf:
            delay_ts.append(0)
        elif burstiness == math.inf:
            delay_ts.append(1.0 / request_rate)
        else:
            theta = 1.0 / (request_rate * burstiness)
            delay_ts.append(rng.gamma(shape=burstiness, scale=theta))
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    if ramp_up is None and delay_ts[-1] != 0:
        target_total_delay_s = num_requests / request_rate
        normalize_factor = target_total_delay_s / delay_ts[-1]
        delay_ts = [delay * normalize_factor for delay in delay_ts]
    return [float(d) for d in delay_ts]
