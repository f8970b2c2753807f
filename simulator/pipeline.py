"""Pipeline parallelism: a step's stages as a chain of events, with steps in flight.

vLLM with ``pipeline_parallel_size = pp > 1`` keeps up to ``max_concurrent_batches``
steps in its batch queue (``vllm/config/vllm.py``): ``pp + 1`` with async scheduling
(model runner V2, the default), ``pp`` without it; with pp = 1 it is 2 (async) or 1
(sync: no batch queue). Stage ``s`` of step ``k`` runs on its own GPUs and starts when

* stage ``s - 1`` of step ``k`` has ended (its p2p send included), and
* stage ``s`` has finished step ``k - 1``::

    stage 0  [k=1 ][k=2 ][k=3 ]
    stage 1        [k=1 ][k=2 ][k=3 ]        end(k) = end of its last stage
                         ^ step 1's output is processed here

so with equal stages and the queue full, steps leave the pipe every stage time instead
of every pp stage times. ``stage_ends`` is that recurrence; the replica
(``simulator.replica``) keeps each stage's free time and processes a step's output when
its last stage ends.
"""

from __future__ import annotations

from typing import Sequence


def max_concurrent_batches(pp: int, async_scheduling: bool) -> int:
    """vLLM's ``VllmConfig.max_concurrent_batches`` with model runner V2 (its default)."""
    if async_scheduling:
        return pp + 1
    return pp


def stage_ends(ready_s: float, stage_times_s: Sequence[float], stage_free_s: Sequence[float]) -> list[float]:
    """End time of every stage of one step launched at ``ready_s``.

    ``stage_free_s[s]``: when stage s finishes the previous step. Stage s starts at
    ``max(end of stage s-1 of this step, stage_free_s[s])`` (stage 0: ``ready_s``) and lasts
    ``stage_times_s[s]``. The step starts at ``max(ready_s, stage_free_s[0])``.
    """
    if len(stage_times_s) != len(stage_free_s):
        raise ValueError(f"{len(stage_times_s)} stage times for {len(stage_free_s)} stages")
    t = ready_s
    ends = []
    for duration, free in zip(stage_times_s, stage_free_s):
        t = max(t, free) + duration
        ends.append(t)
    return ends
