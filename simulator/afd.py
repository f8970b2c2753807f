"""Attention-FFN disaggregation (``--architecture afd``): roles P, A and F (DESIGN.md §2).

    client ─▶ P (prefill, kv_role producer) ──KV transfer──▶ A (attention, kv_role consumer)
                                                             │ per decode layer, per lane:
                                                             │   A ──activations──▶ F ──▶ A
                                                             ▼
                                                      tokens to the client

* P is PDD's prefill role (``simulator.control_plane.compile_role``) and the request path is
  PDD's proxy (``simulator.pd_proxy.PDProxy``): A plays the decode role, runs vLLM's
  scheduler with kv_role "consumer", pulls the prompt KV from P, then decodes.
* A holds attention weights, embeddings, lm_head and the KV cache; F holds the FFN / MoE
  weights (``--ffn-tp`` x ``--ffn-ep`` GPUs per F replica). Each A replica
  (``--attention-dp`` engines of ``--attention-tp`` GPUs) is paired with one F replica.
* A step of an A engine splits its batch into ``lanes`` micro-batches (requests kept whole,
  token-balanced). Per layer and lane: A computes norms + QKV + attention + o_proj [+ TP
  all-reduce], sends the lane's activations A→F, F computes router + experts (slowest EP
  rank) + shared experts [+ FFN-TP all-reduce], sends the result F→A. Lanes ping-pong: A
  works on lane i+1 while F works on lane i. The step duration comes from
  :func:`afd_timeline`, an exact list schedule over layers x lanes with four FIFO
  resources (A, link A→F, F, link F→A).

Transfers (per lane per layer, priced on the busiest GPU): the A→F send is the EP dispatch
(each token goes to the ranks of its top-k experts: ``copies`` = the expected number of
distinct EP ranks its k experts fall on under uniform routing, ep x (1 - C(E - E/ep, k) / C(E, k));
1 without EP),
the F→A send the combine. A-side bytes = tokens x hidden x act bytes x copies / attention TP
(the TP ranks split the tokens); F-side bytes = all the unit's tokens x hidden x act bytes x
copies / EP. Time = latency + max(A side, F side) / bandwidth, bandwidth = NVLink when the
pair fits one node with one GPU type, else the slower NIC (``--afd-link-bandwidth`` wins).

Approximations (stated):
- The ``attention_dp`` engines of an A replica: for an MoE model they are the DP ranks of
  one lockstep group (``simulator.dp_group``, as co-located and PDD run MoE DP): each rank
  has its own scheduler and KV cache, idle ranks run dummy batches, the step lasts as long
  as the slowest rank; F prices a lane at ``attention_dp`` x the rank's padded lane tokens,
  i.e. every rank padded to the busiest one (vLLM pads DP ranks to the largest batch under
  CUDA graphs; eager ranks run their own counts, which this overstates). F work, EP wait and
  the F busy fraction count once per group step (its busiest rank's). For a dense model the
  engines schedule independently, ranks assumed balanced and in phase for F's pricing.
  F replicas are not shared across A replicas.
- Lane transfers in one direction are serialized (FIFO) on a dedicated A–F link per engine;
  they do not share bandwidth with P→A KV transfers (``SharedLinkTransfers``) nor with
  other A engines' activations.
- Attention time per layer is the average over layers (sliding-window layers are spread
  evenly; a Gated DeltaNet model's GDN layers likewise: their kernels in the attention time,
  their projections in A's per-layer time beside the full-attention layers'); F layers are dense
  or MoE as ``ModelSpec.is_moe_layer`` says.
- Embedding runs on A before layer 0; final norm, lm_head and sampler on A after every
  lane has returned from the last layer.
- EP wait = (slowest EP rank's expert time - mean EP rank's expert time) per MoE layer and
  lane; it is part of F's time (F waits for the straggler before the combine).
- A's KV budget follows vLLM's formula with the A GPU's weights = the model's weights minus
  the MLP/MoE weights. Pipeline parallelism is not supported on A or F.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from frontier.ops import ElementwiseOp, MoeOp
from frontier.parallel import ParallelSpec
from simulator.batch_engine import (BatchEngine, BatchShape, StepCost, _cdiv, min_graph_mode, quant_compute_dtype,
                                    mode_timings, pricing_notes)
from simulator.cluster import Cluster, Role
from simulator.dp_group import LockstepRanks

DEFAULT_AFD_LANES = 2
DEFAULT_AFD_LINK_LATENCY_S = 1e-5     # placeholder per activation transfer (launch + NIC/NVLink setup)
MAX_CACHE_ENTRIES = 100_000
FAST_WARM_LAYERS = 3                  # exact layers of a run before its F-bound fast path may take over
LANES_ERROR = "afd_timeline needs the same (non-zero) number of lanes on every layer"


# ---------------------------------------------------------------------------------- the schedule
@dataclass(frozen=True)
class AfdTimeline:
    """Result of :func:`afd_timeline` (seconds, relative to the step start)."""

    end_s: float                          # the step ends (tail included)
    a_busy_s: float                       # head + all attention work + tail
    f_busy_s: float                       # all FFN work
    xfer_s: float                         # link busy time, both directions summed
    a_end: tuple[tuple[float, ...], ...]  # [layer][lane] end of A's work
    f_end: tuple[tuple[float, ...], ...]  # [layer][lane] end of F's work
    r_end: tuple[tuple[float, ...], ...]  # [layer][lane] F→A transfer lands


def afd_timeline(a: list[list[float]], s: list[list[float]], f: list[list[float]],
                 r: list[list[float]], head_s: float = 0.0, tail_s: float = 0.0, *,
                 per_item: bool = True) -> AfdTimeline:
    """Exact list schedule of one AFD decode step over ``L`` layers x ``N`` lanes.

    Inputs are ``[layer][lane]`` durations: ``a`` A compute, ``s`` A→F transfer, ``f`` F
    compute, ``r`` F→A transfer. Four resources run one item at a time, each in the order
    (layer 0 lane 0), (layer 0 lane 1), ..., (layer 1 lane 0), ...:

        A:    [head][a00][a01]         [a10]      [a11]            [tail]
        A→F:           [s00][s01]           [s10]      [s11]
        F:                  [f00]  [f01]         [f10]      [f11]
        F→A:                    [r00]   [r01]         [r10]      [r11]

    with ``(l, j)`` = layer l, lane j and the recurrence (``prev`` = the previous item on
    the same resource, ``R[-1][j]`` = ``head_s``)::

        A_start[l][j] = max(A_end[prev], R_end[l-1][j])      (lane j's input is back)
        S_start[l][j] = max(S_end[prev], A_end[l][j])
        F_start[l][j] = max(F_end[prev], S_end[l][j])
        R_start[l][j] = max(R_end[prev], F_end[l][j])
        end           = max(A_end[last], max_j R_end[L-1][j]) + tail_s

    Every X_end = X_start + duration. Pure: no state, no events. ``per_item=False`` leaves
    a_end/f_end/r_end empty (step pricing needs only the totals; it runs once per step).
    """
    n_layers = len(a)
    if not n_layers or not (len(s) == len(f) == len(r) == n_layers):
        raise ValueError("afd_timeline needs a, s, f, r with the same (non-zero) number of layers")
    lanes = len(a[0])
    if not per_item:
        return timeline_totals(_layer_runs(a, s, f, r), head_s, tail_s)
    if not lanes or {*map(len, a), *map(len, s), *map(len, f), *map(len, r)} != {lanes}:
        raise ValueError(LANES_ERROR)
    state = (head_s, 0.0, 0.0, 0.0, [head_s] * lanes)   # A, A→F, F, F→A free; lane j's activations are on A
    a_end, f_end, r_end = [], [], []
    for l in range(n_layers):
        ae, fe, re_ = [], [], []
        for j, item in enumerate(zip(a[l], s[l], f[l], r[l])):
            state = _loop(state, [(*item, j)], 1)          # one item of the recurrence
            ae.append(state[0])
            fe.append(state[2])
            re_.append(state[3])
        a_end.append(tuple(ae))
        f_end.append(tuple(fe))
        r_end.append(tuple(re_))
    a_free, _, _, _, back = state
    end = max(a_free, max(back)) + tail_s
    a_busy = head_s + tail_s + sum(map(sum, a))
    return AfdTimeline(end, a_busy, sum(map(sum, f)), sum(map(sum, s)) + sum(map(sum, r)),
                       tuple(a_end), tuple(f_end), tuple(r_end))


Run = tuple[int, list[float], list[float], list[float], list[float]]   # (layers, a, s, f, r rows)


def _layer_runs(a: list[list[float]], s: list[list[float]], f: list[list[float]],
                r: list[list[float]]) -> list[Run]:
    """Consecutive layers whose four rows are the same list objects, as runs."""
    runs: list[list] = []
    prev = None
    for rows in zip(a, s, f, r):
        if prev is not None and rows[0] is prev[0] and rows[1] is prev[1] and rows[2] is prev[2] \
                and rows[3] is prev[3]:
            runs[-1][0] += 1
        else:
            runs.append([1, *rows])
            prev = rows
    return [tuple(run) for run in runs]


def timeline_totals(layer_runs: list[Run], head_s: float, tail_s: float) -> AfdTimeline:
    """``afd_timeline(..., per_item=False)`` over layers given as runs of identical rows
    ``(layers, a_row, s_row, f_row, r_row)``: the same recurrence and the same floats, no
    per-item ends (:func:`end_and_a_busy`, :func:`f_busy_and_xfer`)."""
    lanes = len(layer_runs[0][1])
    for _, *rows in layer_runs:
        if not lanes or {*map(len, rows)} != {lanes}:
            raise ValueError(LANES_ERROR)
    end, a_busy = end_and_a_busy(layer_runs, head_s, tail_s)
    return AfdTimeline(end, a_busy, *f_busy_and_xfer(layer_runs), (), (), ())


def end_and_a_busy(layer_runs: list[Run], head_s: float, tail_s: float) -> tuple[float, float]:
    """(end, A busy) of :func:`timeline_totals` (rows not checked). Each run goes through
    :func:`_run_layers` (the loop, or its fast paths where they are proven to give the same
    floats); A busy sums each layer's A row sum in layer order. The step pricer passes its
    two runs (dense layers, MoE layers) directly."""
    lanes = len(layer_runs[0][1])
    state = (head_s, 0.0, 0.0, 0.0, [head_s] * lanes)    # A, A→F, F, F→A free; lane j's activations back on A
    a_sums = []                                            # per layer, in layer order
    for count, *rows in layer_runs:
        sums = [sum(x) for x in rows]
        state = _run_layers(state, count, list(zip(*rows, range(lanes))), rows, sums)
        a_sums += [sums[0]] * count
    a_free, _, _, _, back = state
    return max(a_free, max(back)) + tail_s, head_s + tail_s + sum(a_sums)


def f_busy_and_xfer(layer_runs: list[Run]) -> tuple[float, float]:
    """(F busy, both links' busy time) of :func:`timeline_totals`: each layer's row sums, in
    layer order (no A row needed: the step pricer computes them once per step plan)."""
    s_sums, f_sums, r_sums = [], [], []
    for count, _, s, f, r in layer_runs:
        s_sums += [sum(s)] * count
        f_sums += [sum(f)] * count
        r_sums += [sum(r)] * count
    return sum(f_sums), sum(s_sums) + sum(r_sums)


def _loop(state: tuple, items: list[tuple], layers: int) -> tuple:
    """The recurrence of :func:`afd_timeline` over ``layers`` identical layers (``items``:
    one ``(a, s, f, r, lane)`` per lane); ``state`` = (A, A→F, F, F→A free, lanes' return times)."""
    a_free, s_free, f_free, r_free, back = state
    back = back[:]
    # x = max(x, y) + d written as "if y > x: x = y; x += d" (max keeps x on ties): same floats
    for aj, sj, fj, rj, j in items * layers:
        b = back[j]
        if b > a_free:
            a_free = b
        a_free += aj
        if a_free > s_free:
            s_free = a_free
        s_free += sj
        if s_free > f_free:
            f_free = s_free
        f_free += fj
        if f_free > r_free:
            r_free = f_free
        r_free += rj
        back[j] = r_free
    return a_free, s_free, f_free, r_free, back


def _run_layers(state: tuple, count: int, items: list[tuple], rows: list[list[float]],
                sums: list[float]) -> tuple:
    """:func:`_loop` over a run of ``count`` identical layers, with an exact fast path when F
    is the bottleneck.

    F-bound pattern (item i = lane j of a layer, N lanes, ``x_i`` = the item's durations):
    every max of the recurrence picks the same side, so ``F_i = F_{i-1} + f_i``,
    ``R_i = F_i + r_i``, ``A_i = R_{i-N} + a_i``, ``S_i = A_i + s_i`` (each ``+`` one float
    addition, as the loop does). Once the last N+1 items of the loop followed the pattern, the
    pattern holds for every later item of the run if, for every lane j (j-1 cyclic):

        r[j-1] <= f[j]                                   (R waits on F: both add to F_{i-1};
                                                          rounding is monotone, so exact)
        r[j-1] + a[j-1]        <= f[j] + r[j]           - tol   (A waits on lane j's return)
        r[j-1] + a[j-1] + s[j-1] <= f[j] + r[j] + a[j]  - tol   (A→F waits on A)
        r[j] + a[j] + s[j]     <= f[j+1] + ... + f[j+N-1] - tol (F waits on its previous item)

    Each side of the last three is one F value (F_{i-1-N} or F_{i-N}) plus at most N + 3 float
    additions, each off the real sum by at most 2^-53 x the largest value ``vmax`` (a bound on
    every value of the run), so ``tol`` = (N + 8) x 2^-48 x vmax covers them with room to
    spare. Under the pattern only the F chain is a sequence of additions; it is accumulated
    in order and the run's final A, A→F, F→A and return times are the pattern's last items.
    """
    lanes = len(items)
    warm = FAST_WARM_LAYERS
    if lanes == 1 and count > 1:
        return _one_lane(state, items, count, rows)
    if lanes < 2 or count < warm + 2:
        return _loop(state, items, count)
    state = _loop(state, items, 1)
    state, ok = _traced_loop(state, items, warm - 1)
    if not ok or not _f_bound(state, count - warm, rows, sums):
        return _loop(state, items, count - warm)
    a, s, f, r = rows
    chain = list(accumulate(f * (count - warm), initial=state[2]))     # F after every item
    last = chain[-2 * lanes:]                                            # the last two layers' F
    back = [x + rj for x, rj in zip(last[lanes:], r)]                   # the last layer's R
    a_free = (last[lanes - 1] + r[-1]) + a[-1]                           # on the last lane's previous R
    return a_free, a_free + s[-1], chain[-1], back[-1], back


def _one_lane(state: tuple, items: list[tuple], count: int, rows: list[list[float]]) -> tuple:
    """:func:`_loop` with one lane: one chain. With durations >= 0 and a state where A, A→F
    and F are free no later than F→A, which is the lane's return (true after any layer), every
    max of the recurrence takes the lane's own previous stage (rounding is monotone: x + d >= x
    for d >= 0), so the run is the additions a, s, f, r, a, s, ... in order from the return."""
    state = _loop(state, items, 1)
    a_free, s_free, f_free, r_free, back = state
    if not (r_free == back[0] and a_free <= r_free and s_free <= r_free and f_free <= r_free
            and r_free > 0.0 and all(x[0] >= 0.0 for x in rows)):     # (> 0: no signed zeros to tell apart)
        return _loop(state, items, count - 1)
    a, s, f, r = (x[0] for x in rows)
    *_, a_free, s_free, f_free, r_free = accumulate([a, s, f, r] * (count - 1), initial=r_free)
    return a_free, s_free, f_free, r_free, [r_free]


def _traced_loop(state: tuple, items: list[tuple], layers: int) -> tuple[tuple, bool]:
    """:func:`_loop`, and whether every item followed the F-bound pattern (A took the lane's
    return, A→F took A's end, F its own previous end, F→A F's end; ties count as either)."""
    a_free, s_free, f_free, r_free, back = state
    back = back[:]
    ok = True
    for aj, sj, fj, rj, j in items * layers:
        b = back[j]
        ok = ok and b >= a_free
        a_free = (b if b > a_free else a_free) + aj
        ok = ok and a_free >= s_free
        s_free = (a_free if a_free > s_free else s_free) + sj
        ok = ok and s_free <= f_free
        f_free = (s_free if s_free > f_free else f_free) + fj
        ok = ok and f_free >= r_free
        r_free = (f_free if f_free > r_free else r_free) + rj
        back[j] = r_free
    return (a_free, s_free, f_free, r_free, back), ok


def _f_bound(state: tuple, layers: int, rows: list[list[float]], sums: list[float]) -> bool:
    """The per-lane conditions of :func:`_run_layers` for ``layers`` more layers from ``state``
    (``sums``: the four rows' sums)."""
    a, s, f, r = rows
    n = len(a)
    vmax = 2.0 * (max(*state[:4], *state[4]) + layers * (sums[0] + sums[1] + sums[2] + sums[3]))
    if not (vmax < math.inf and min(*a, *s, *f, *r) >= 0.0):
        return False
    tol = (n + 8) * 2.0 ** -48 * vmax + 2.0 ** -1000
    f_all = sums[2]
    for j in range(n):
        i = j - 1                              # the previous lane (cyclic)
        if not (r[i] <= f[j]
                and r[i] + a[i] + tol <= f[j] + r[j]
                and r[i] + a[i] + s[i] + tol <= f[j] + r[j] + a[j]
                and r[j] + a[j] + s[j] + tol <= f_all - f[j]):
            return False
    return True


def split_lanes(new_tokens: tuple[int, ...], lanes: int) -> list[tuple[int, int]]:
    """Split the step's requests (in order, kept whole) into at most ``lanes`` contiguous
    ``[start, stop)`` groups of about equal tokens; fewer requests than lanes -> one per lane.

    Lane b (of k) ends after the first request i (past lane b-1's end) whose running token
    sum ``acc`` reaches ``acc * k >= total * b``, provided the ``k - b`` lanes after it still
    get a request each; else no further lane is cut (found by bisection on the running sums).
    """
    n = len(new_tokens)
    k = max(1, min(lanes, n))
    total = sum(new_tokens)
    running = list(accumulate(new_tokens))
    bounds, start = [], 0
    for b in range(1, k):
        i = bisect_left(running, total * b, start, key=lambda acc: acc * k)
        if i > n - 1 - (k - b):            # not reached, or too few requests left for the other lanes
            break
        bounds.append((start, i + 1))
        start = i + 1
    bounds.append((start, n))
    return bounds


# ---------------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class AfdRole:
    """Layout of the A or F role; ``None`` = default (A: main flags; F: tp 1, ep 1, A's GPU/replicas)."""

    name: str                      # "attention" | "ffn"
    tp: int | None = None
    dp: int | None = None          # attention only
    ep: int | None = None          # ffn only
    replicas: int | None = None
    gpu: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ("attention", "ffn"):
            raise ValueError(f"AFD role {self.name!r} is not attention or ffn")
        for key in ("tp", "dp", "ep", "replicas"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"--{self.name}-{key} must be a positive integer, got {value!r}")
        if self.name == "attention" and self.ep is not None:
            raise ValueError("the attention role has no EP; use --ffn-ep")
        if self.name == "ffn" and self.dp is not None:
            raise ValueError("the FFN role has no DP; use --ffn-ep or --ffn-replicas")


@dataclass(frozen=True)
class AfdSpec:
    """The P/A/F part of a serving spec."""

    attention: AfdRole = field(default_factory=lambda: AfdRole("attention"))
    ffn: AfdRole = field(default_factory=lambda: AfdRole("ffn"))
    lanes: int = DEFAULT_AFD_LANES
    link_bandwidth_bytes_per_s: float | None = None      # None: NVLink within a node, else NIC
    link_latency_s: float = DEFAULT_AFD_LINK_LATENCY_S

    def __post_init__(self) -> None:
        if self.attention.name != "attention" or self.ffn.name != "ffn":
            raise ValueError("AfdSpec needs AfdRole('attention') and AfdRole('ffn')")
        if isinstance(self.lanes, bool) or not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"--afd-lanes must be a positive integer, got {self.lanes!r}")
        bw = self.link_bandwidth_bytes_per_s
        if bw is not None and not bw > 0:
            raise ValueError(f"--afd-link-bandwidth must be > 0 GB/s, got {bw / 1e9!r}")
        if not self.link_latency_s >= 0:
            raise ValueError(f"AFD link latency must be >= 0 s, got {self.link_latency_s!r}")


# ---------------------------------------------------------------------------------- the engine
@dataclass(slots=True)
class AfdStepStats:
    a_busy_s: float
    f_busy_s: float
    xfer_s: float
    ep_wait_s: float
    lanes: int


class _StepPlan(NamedTuple):
    """An A step's pricing but its attention (``AfdEngine._plan``)."""

    lanes: list[tuple[int, int]]             # [start, stop) of each lane's requests
    attn_timings: list[str]                  # per lane
    a_dense: list[float]                     # per lane: A's time per layer without attention
    runs: list[tuple[int, list[float], list[float]]]   # (layers, A→F row, F row): dense, MoE
    f_busy_s: float                          # F's work of the step
    xfer_s: float                            # A→F and F→A transfers of the step
    head_s: float                            # embedding
    tail_s: float                            # final norm + lm_head + sampler
    ep_wait_s: float                         # EP wait of the step, all MoE layers
    num_tokens: int
    padded_tokens: int
    mode: str                                # the step's graph mode


class AfdEngine:
    """Prices one A engine's step as the AFD ping-pong schedule; duck-types ``BatchEngine``.

    ``attn`` prices A's ops with A's layout and GPU (tp = attention TP); ``ffn`` prices F's
    ops with F's GPU (parallel: ep = FFN EP, ffn_tp = FFN TP; its MoE router gives the EP
    rank loads). ``stats`` gets one entry per ``step_cost`` call (the replica writes one
    trace row per call).
    """

    def __init__(self, attn: BatchEngine, ffn: BatchEngine, *, lanes: int, attention_dp: int,
                 ffn_tp: int, ffn_ep: int, link_bw_bytes_per_s: float, link_latency_s: float) -> None:
        self.attn, self.ffn = attn, ffn
        self.model, self.gpu, self.cudagraph = attn.model, attn.gpu, attn.cudagraph
        self.lanes, self.attention_dp = lanes, attention_dp
        self.ffn_tp, self.ffn_ep = ffn_tp, ffn_ep
        self.link_bw, self.link_latency = link_bw_bytes_per_s, link_latency_s
        self.stats: list[AfdStepStats] = []
        self._cache: dict[BatchShape, tuple[StepCost, AfdStepStats]] = {}
        self._a_dense: dict[tuple[int, str], float] = {}
        self._f_layer: dict[tuple[int, str], tuple[float, float, float]] = {}
        self._ends_memo: dict[tuple[int, str], tuple[float, float]] = {}
        self._lanes: dict[tuple[int, int, bool], tuple] = {}
        self._decode_plans: dict[int, _StepPlan] = {}         # decode steps by request count
        self._q = attn.cudagraph.uniform_decode_query_len
        self._moe_copies = self._copies()

    # -- public
    def step_cost(self, batch: BatchShape) -> StepCost:
        """The step's cost; memoized except for uniform decode steps (every request
        ``uniform_decode_query_len`` new tokens): their context lengths grow every step, so the
        shape almost never repeats and hashing or comparing it (and holding its tuples) costs
        more than pricing it again."""
        new = batch.new_tokens
        if new.count(self._q) == len(new):
            got = self._price(batch)
        else:
            got = self._cache.get(batch)
            if got is None:
                got = self._price(batch)
                if len(self._cache) >= MAX_CACHE_ENTRIES:
                    self._cache.clear()
                self._cache[batch] = got
        self.stats.append(got[1])
        return got[0]

    def lockstep_costs(self, batches: list[BatchShape], num_idle: int) -> list[StepCost]:
        """A lockstep A group's busy ranks, each priced by ``step_cost`` (F gathers every
        rank's tokens as the step's plan says; no DP padding rule applies on A)."""
        return [self.step_cost(b) for b in batches]

    # -- pieces
    def _price(self, batch: BatchShape) -> tuple[StepCost, AfdStepStats]:
        new, ctx = batch.new_tokens, batch.context_lens
        n = len(new)
        decode = new.count(1) == n
        plan = self._decode_plans.get(n) if decode else None
        if plan is None:
            plan = self._plan(new)
            if decode:      # a decode step's plan depends on its request count only
                self._decode_plans[n] = plan
        n_layers = self.model.num_layers
        a_lane = []
        if decode and self.attn._decode_attn is not None:
            for (lo, hi), timing, a_dense in zip(plan.lanes, plan.attn_timings, plan.a_dense):
                a_lane.append(a_dense + self.attn.decode_attention_time_s(hi - lo, sum(ctx[lo:hi]), timing) / n_layers)
        else:
            for (lo, hi), timing, a_dense in zip(plan.lanes, plan.attn_timings, plan.a_dense):
                a_lane.append(a_dense + self.attn.attention_time_s(new[lo:hi], ctx[lo:hi], timing) / n_layers)
        # the combine (r) moves the same bytes back as the dispatch (s)
        end_s, a_busy_s = end_and_a_busy([(count, a_lane, s, f, s) for count, s, f in plan.runs],
                                         plan.head_s, plan.tail_s)
        stats = AfdStepStats(a_busy_s, plan.f_busy_s, plan.xfer_s, plan.ep_wait_s, len(plan.lanes))
        return StepCost(end_s, plan.num_tokens, plan.padded_tokens, plan.mode), stats

    def _plan(self, new: tuple[int, ...]) -> _StepPlan:
        """Everything of a step but its attention, from its requests' new tokens."""
        mdl = self.model
        lanes = split_lanes(new, self.lanes)
        timings, a_dense, f_dense, f_moe, ep_wait, s_dense, s_moe = [], [], [], [], [], [], []
        modes, padded_total = [], 0
        for lo, hi in lanes:
            lane, reqs = new[lo:hi], hi - lo
            mode, padded, attn_timing, ad, fd, fm, wait, sd, sm = self._lane(sum(lane), reqs,
                                                                           lane.count(self._q) == reqs)
            modes.append(mode)
            padded_total += padded
            timings.append(attn_timing)
            a_dense.append(ad)
            f_dense.append(fd)
            f_moe.append(fm)
            ep_wait.append(wait)
            s_dense.append(sd)
            s_moe.append(sm)
        n_dense = mdl.num_layers - mdl.num_moe_layers
        runs = [run for run in ((n_dense, s_dense, f_dense), (mdl.num_moe_layers, s_moe, f_moe)) if run[0]]
        num_tokens = sum(new)
        head, final_norm = self._ends(num_tokens, mode_timings(modes[0])[0])
        mode = min_graph_mode(set(modes))
        f_busy, xfer = f_busy_and_xfer([(count, None, s, f, s) for count, s, f in runs])   # r moves s's bytes back
        return _StepPlan(lanes, timings, a_dense, runs, f_busy, xfer, head,
                         final_norm + self.attn._head_time_s(len(new)), sum(ep_wait) * mdl.num_moe_layers,
                         num_tokens, padded_total, mode)

    def _lane(self, tokens: int, reqs: int, uniform: bool) -> tuple:
        """Everything of a lane but its attention, from its tokens, requests and whether it is a
        uniform decode, memoized: (graph mode, padded tokens, attention timing, A's dense time
        per layer, F's dense / MoE time and EP wait per layer, A→F time of a dense / MoE layer)."""
        key = (tokens, reqs, uniform)
        got = self._lanes.get(key)
        if got is None:
            if len(self._lanes) >= MAX_CACHE_ENTRIES:
                self._lanes.clear()
            mode, padded = self.cudagraph.dispatch(tokens, reqs, uniform)
            dense_timing, attn_timing = mode_timings(mode)
            got = self._lanes[key] = (mode, padded, attn_timing, self._a_dense_per_layer(padded, dense_timing),
                                      *self._f_per_layer(padded * self.attention_dp, dense_timing),
                                      self._xfer_s(padded, 1), self._xfer_s(padded, self._moe_copies))
        return got

    def _ends(self, m: int, timing: str) -> tuple[float, float]:
        """(embedding, final norm) times of A over the step's m tokens, memoized."""
        key = (m, timing)
        got = self._ends_memo.get(key)
        if got is None:
            h, ab = self.model.hidden_size, self.model.quant.activation_bytes
            got = self._ends_memo[key] = (
                self.attn._times([(ElementwiseOp("embedding", m, h, 2 * h * ab), 1)], timing),
                self.attn._times([(ElementwiseOp("final_norm", m, h, 2 * h * ab), 1)], timing))
        return got

    def _copies(self) -> float:
        """EP ranks one token's activations go to: the expected number of ranks its top-k
        distinct experts (uniform, without replacement) fall on; 1 without EP."""
        mdl, ep = self.model, self.ffn_ep
        if not mdl.is_moe or ep == 1:
            return 1.0
        e, k = mdl.num_experts, mdl.num_experts_per_tok
        miss = math.comb(e - e // ep, k) / math.comb(e, k)     # a given rank holds none of the k
        return ep * (1.0 - miss)

    def _xfer_s(self, lane_tokens: int, copies: float) -> float:
        mdl = self.model
        per_token = mdl.hidden_size * mdl.quant.activation_bytes * copies
        a_side = lane_tokens * per_token / self.attn.parallel.tp
        f_side = lane_tokens * self.attention_dp * per_token / self.ffn_ep
        return self.link_latency + max(a_side, f_side) / self.link_bw

    def _a_dense_per_layer(self, m: int, timing: str) -> float:
        """A's time per layer over m tokens outside the attention kernels: the norms, the token
        mixer's GEMMs (a Gated DeltaNet model's layers averaged: its full-attention layers'
        projections and its GDN layers' ones, ``BatchEngine._gdn_gemms``) and the TP all-reduce."""
        key = (m, timing)
        t = self._a_dense.get(key)
        if t is None:
            e, mdl = self.attn, self.model
            h, ab, tp = mdl.hidden_size, mdl.quant.activation_bytes, e.parallel.tp
            ops: list[tuple[object, int]] = [
                (ElementwiseOp("input_norm", m, h, 4 * h * ab), 1),
                (ElementwiseOp("post_norm", m, h, 4 * h * ab), 1)]
            if tp > 1:
                ops.append((e._comm("all_reduce", m * h * ab, tp), 1))
            n_gdn = mdl.num_linear_attention_layers
            mixer = e._times([(op, 1) for op in e._attn_gemms(m, mdl.num_attention_heads // tp)], timing)
            if n_gdn:
                gdn = e._times([(op, 1) for op in e._gdn_gemms(m)], timing)
                mixer = ((mdl.num_layers - n_gdn) * mixer + n_gdn * gdn) / mdl.num_layers
            t = self._a_dense[key] = e._times(ops, timing) + mixer
        return t

    def _f_per_layer(self, m: int, timing: str) -> tuple[float, float, float]:
        """(dense-layer time, MoE-layer time, EP wait per MoE layer) of F over m tokens."""
        key = (m, timing)
        got = self._f_layer.get(key)
        if got is not None:
            return got
        e, mdl = self.ffn, self.model
        h, ab, tp, ep = mdl.hidden_size, mdl.quant.activation_bytes, self.ffn_tp, self.ffn_ep
        reduce = [(e._comm("all_reduce", m * h * ab, tp), 1)] if tp > 1 else []
        dense = 0.0
        if mdl.num_layers > mdl.num_moe_layers:
            inter = _cdiv(mdl.intermediate_size, tp * ep)
            ops = [(op, 1) for op in e._mlp_ops("dense_mlp", "mlp", m, inter)]
            if tp * ep > 1:
                ops.append((e._comm("all_reduce", m * h * ab, tp * ep), 1))
            dense = e._times(ops, timing)
        moe = wait = 0.0
        if mdl.num_moe_layers:
            n_e, topk = mdl.num_experts, mdl.num_experts_per_tok
            local = _cdiv(n_e, ep)
            wb = mdl.quant.bytes_per_param("routed_experts")
            method = mdl.quant.method_of("routed_experts")
            dtype = quant_compute_dtype(method, wb, e.gpu.sm_version)
            inter = _cdiv(mdl.moe_intermediate_size, tp)
            # the F replica's sharding and weight format: which profiled kernel row prices the op
            shard = {"moe_tp": tp, "moe_ep": ep, "quant_method": method}
            router = e.moe_router
            if router is None or router.balanced:
                pairs = max(_cdiv(m * topk * local, n_e), 1)
                expert_t = e._times([(MoeOp(m, n_e, local, topk, h, inter, pairs, wb, ab, dtype, **shard), 1)],
                                    timing)
            else:
                loads = router.rank_loads(m)
                distinct = list(dict.fromkeys(loads))
                ops = [MoeOp(m, n_e, local, topk, h, inter, max(sum(r), 1), wb, ab, dtype, r, **shard)
                       for r in distinct]
                times = dict(zip(distinct, e.cost_model.op_times_s(ops, timing)))
                per_rank = [times[r] for r in loads]
                expert_t = max(per_rank)
                wait = expert_t - sum(per_rank) / len(per_rank)
            ops2: list[tuple[object, int]] = [(op, 1) for op in e._router_ops(m)]
            shared = mdl.num_shared_experts * mdl.shared_expert_intermediate_size
            if shared:   # each EP rank runs the shared experts of its share of the tokens
                ops2 += [(op, 1) for op in e._mlp_ops("shared_experts", "shared", _cdiv(m, ep), _cdiv(shared, tp))]
            moe = expert_t + e._times(ops2 + reduce, timing)
        got = self._f_layer[key] = (dense, moe, wait)
        return got


# ---------------------------------------------------------------------------------- compile + run
def _attention_weight_bytes(model, parallel: ParallelSpec) -> int:
    """A GPU's weights: the model's minus every layer's MLP/MoE weights."""
    full = model.weight_bytes_per_rank(parallel)
    mlp = sum(model._mlp_bytes(model.is_moe_layer(i), parallel)
              for i in range(model.num_layers))
    return int(round(full - mlp))


def _ffn_weight_bytes(model, tp: int, ep: int) -> int:
    par = ParallelSpec(tp=tp, dp=ep, ep=ep, ffn_tp=tp)
    return int(round(sum(model._mlp_bytes(model.is_moe_layer(i), par)
                         for i in range(model.num_layers))))


def attention_memory(resolved):
    """vLLM's KV budget (``simulation.build_memory``, every engine flag included) with A's
    weights (no MLP/MoE).

    Same formula: the budget is computed on a GPU whose memory is larger by exactly what the
    MLP weights would have taken, then weights and requested bytes are restated for A.
    """
    from simulator.simulation import build_memory
    args, model, gpu = resolved.args, resolved.model, resolved.gpu
    weights = _attention_weight_bytes(model, resolved.parallel)
    mlp = model.weight_bytes_per_rank(resolved.parallel) - weights
    bumped = replace(gpu, memory_bytes=gpu.memory_bytes + math.ceil(mlp / args.effective_gpu_memory_utilization))
    budget = build_memory(resolved, gpu=bumped)
    return replace(budget, weights_bytes=weights,
                   requested_bytes=math.ceil(gpu.memory_bytes * args.effective_gpu_memory_utilization))


def _compile_attention(spec, afd: AfdSpec, loop, trace, make_engines):
    from simulator.control_plane import CompiledRole
    from simulator.replica import Replica
    from simulator.scheduler import Scheduler
    from simulator.simulation import fit_max_model_len, resolve_engine

    main, role = spec.engine, afd.attention
    args = replace(main, tensor_parallel_size=role.tp or main.tensor_parallel_size,
                   pipeline_parallel_size=1, data_parallel_size=1, enable_expert_parallel=False,
                   num_replicas=(role.replicas or main.num_replicas) * (role.dp or 1),
                   gpu=role.gpu or main.gpu)
    try:
        resolved = resolve_engine(args)
        memory = attention_memory(resolved)
        resolved = fit_max_model_len(resolved, memory)
        if memory.block_size != resolved.block_size:     # a Gated DeltaNet model's attention block, aligned
            resolved = replace(resolved, block_size=memory.block_size)
    except ValueError as exc:
        raise ValueError(f"attention role: {exc}") from None
    if args.num_gpu_blocks_override is None:
        memory.check_starts(resolved.max_model_len, "attention", "--attention-tp, --attention-gpu")
    sched_config = resolved.scheduler_config(debug=spec.debug)   # pp is 1: AFD refuses PP
    a_dp = role.dp or 1
    lockstep = resolved.model.is_moe and a_dp > 1   # MoE: an A replica's DP ranks step together
    engines = make_engines(resolved, args.num_replicas // a_dp if lockstep else args.num_replicas)

    def new_scheduler() -> Scheduler:
        kv = resolved.kv_cache_manager(memory.num_gpu_blocks, memory.layout, connector=True)
        return Scheduler(sched_config, kv, kv_role="consumer")

    replicas = []
    for i, engine in enumerate(engines):
        sched = LockstepRanks([new_scheduler() for _ in range(a_dp)], resolved.vllm_version) if lockstep else new_scheduler()
        replicas.append(Replica(i, loop, sched, engine, trace,
                                on_update=lambda *a: None, async_scheduling=args.effective_async_scheduling,
                                step_jitter=spec.step_jitter, jitter_seed=spec.workload.seed,
                                role=Role.ATTENTION.value, engine_cpu=spec.engine_cpu))
    cluster = Cluster(Role.ATTENTION, replicas, main.router, resolved.num_gpus // len(replicas))
    from simulator.control_plane import RoleLayout
    return CompiledRole(RoleLayout("decode", tp=args.tensor_parallel_size, replicas=args.num_replicas,
                                   gpu=args.gpu), resolved, memory, cluster)


@dataclass
class FfnSide:
    gpu_name: str
    tp: int
    ep: int
    replicas: int
    num_gpus: int
    weights_bytes: int


def run_afd(spec):
    """Simulate ``spec`` with ``--architecture afd`` to completion."""
    from frontier.gpu import get_gpu
    from simulator.control_plane import PddSpec, build_links, compile_role, kv_pull
    from simulator.predictor_cost import cost_model_stats, make_cost_model
    from simulator.events import EventLoop
    from simulator.kv_transfer import SharedLinkTransfers
    from simulator.moe_routing import make_router as make_moe_router
    from simulator.pd_proxy import PDProxy, _engine_factory, prefill_prefix_cache
    from simulator.role_stats import role_summary
    from simulator.simulation import SimulationResult, run_client
    from simulator.trace import BatchTrace
    from simulator.multimodal import refuse_images
    from simulator.workload import generate_requests

    afd = spec.afd or AfdSpec()
    pdd = spec.pdd or PddSpec()
    loop = EventLoop()
    trace = BatchTrace(keep_requests=spec.keep_batch_trace)
    prefill = compile_role(pdd.prefill, spec.engine, loop, trace, _engine_factory(spec), debug=spec.debug,
                           step_jitter=spec.step_jitter, seed=spec.workload.seed, engine_cpu=spec.engine_cpu)
    model = prefill.resolved.model
    a_role, f_role = afd.attention, afd.ffn
    a_dp = a_role.dp or 1
    a_replicas = a_role.replicas or spec.engine.num_replicas
    f_tp, f_ep = f_role.tp or 1, f_role.ep or 1
    f_replicas = f_role.replicas or a_replicas
    if f_replicas != a_replicas:
        raise ValueError(f"--ffn-replicas {f_replicas} must equal --attention-replicas {a_replicas} "
                         f"(each attention replica pairs with one FFN replica)")
    try:
        get_gpu(a_role.gpu or spec.engine.gpu)
    except ValueError as exc:
        raise ValueError(f"attention role: {exc}") from None
    try:
        f_gpu = get_gpu(f_role.gpu or a_role.gpu or spec.engine.gpu)
    except ValueError as exc:
        raise ValueError(f"ffn role: {exc}") from None
    if f_ep > 1 and not model.is_moe:
        raise ValueError(f"ffn role: --ffn-ep {f_ep} needs an MoE model; {model.name} is dense")
    if model.is_moe and model.num_experts % f_ep:
        raise ValueError(f"ffn role: --ffn-ep {f_ep} must divide the {model.num_experts} experts of {model.name}")
    if model.is_moe and model.moe_intermediate_size % f_tp:
        raise ValueError(f"ffn role: --ffn-tp {f_tp} must divide moe_intermediate_size "
                         f"{model.moe_intermediate_size} of {model.name}")
    if model.num_layers > model.num_moe_layers and model.intermediate_size % (f_tp * f_ep):
        raise ValueError(f"ffn role: --ffn-tp x --ffn-ep = {f_tp * f_ep} must divide intermediate_size "
                         f"{model.intermediate_size} of {model.name}")
    f_weights = _ffn_weight_bytes(model, f_tp, f_ep)
    f_cap = f_gpu.memory_bytes * spec.engine.effective_gpu_memory_utilization
    if f_weights >= f_cap:
        raise ValueError(f"ffn role: FFN/MoE weights {f_weights / 2**30:.2f} GiB per GPU do not fit "
                         f"{f_gpu.name} x gpu_memory_utilization ({f_cap / 2**30:.2f} GiB); raise --ffn-ep or --ffn-tp")
    ffn_side = FfnSide(f_gpu.name, f_tp, f_ep, f_replicas, f_replicas * f_tp * f_ep, f_weights)
    engines_made: list[AfdEngine] = []

    def make_engines(resolved, count: int):
        cudagraph = resolved.cudagraph_config()
        attn = BatchEngine(model, resolved.parallel, resolved.gpu,
                           make_cost_model(resolved.gpu, spec.comm_model, spec.predictor_bundle), cudagraph,
                           vllm_version=resolved.vllm_version)
        f_par = ParallelSpec(tp=1, dp=f_tp * f_ep, ep=f_ep, ffn_tp=f_tp)
        ffn = BatchEngine(model, f_par, f_gpu, make_cost_model(f_gpu, spec.comm_model, spec.predictor_bundle),
                          cudagraph, moe_router=make_moe_router(spec.moe_routing, model, f_par, spec.workload.seed)
                          if model.is_moe else None, vllm_version=resolved.vllm_version)
        a_gpu = resolved.gpu
        one_node = (a_gpu.name == f_gpu.name and resolved.parallel.tp + f_tp * f_ep <= a_gpu.gpus_per_node)
        if afd.link_bandwidth_bytes_per_s is not None:
            bw = afd.link_bandwidth_bytes_per_s
        elif one_node:
            bw = a_gpu.nvlink_bw_bytes_per_s
        else:
            bw = min(a_gpu.network_bw_bytes_per_s, f_gpu.network_bw_bytes_per_s)
        out = []
        for _ in range(count):      # one per A replica's engine, or per lockstep group
            out.append(AfdEngine(attn, ffn, lanes=afd.lanes, attention_dp=a_dp, ffn_tp=f_tp, ffn_ep=f_ep,
                                 link_bw_bytes_per_s=bw, link_latency_s=afd.link_latency_s))
        engines_made.extend(out)
        return out

    attention = _compile_attention(spec, afd, loop, trace, make_engines)
    spec.check_num_gpus([("prefill", prefill.num_gpus), ("attention", attention.num_gpus),
                         ("ffn", ffn_side.num_gpus)])
    if prefill.resolved.max_model_len != attention.resolved.max_model_len:
        raise ValueError(f"prefill max_model_len {prefill.resolved.max_model_len} differs from attention's "
                         f"{attention.resolved.max_model_len}; give --max-model-len")
    specs = generate_requests(spec.workload, vocab_size=model.vocab_size)
    refuse_images(specs, "--architecture afd")
    client = PDProxy(loop, specs, prefill.cluster, attention.cluster, SharedLinkTransfers(loop),
                     build_links(prefill, attention, pdd),
                     kv_pull(model, prefill, attention),
                     attention.resolved.max_model_len, spec.max_concurrency)
    records, summary, sim_wall_s = run_client(loop, client, spec, len(specs))
    duration_s = max((r.finish_s for r in records), default=0.0)
    summary.update(afd_summary(prefill, attention, ffn_side, engines_made, records, duration_s, afd.lanes,
                               _group_steps(trace, engines_made)))
    _add_trace_columns(trace, engines_made)
    summary.update(prefill_prefix_cache(prefill))
    if engines_made:
        summary.update(cost_model_stats(engines_made[0].attn.cost_model))
    summary["pricing_notes"] = pricing_notes(e for pair in engines_made[:1] for e in (pair.attn, pair.ffn))
    engines = {Role.PREFILL.value: prefill.resolved.num_engines, Role.ATTENTION.value: attention.resolved.num_engines}
    summary.update(role_summary(trace.step_cols, engines, loop.now_s))
    result = SimulationResult(attention.resolved, attention.memory, records, client.failed, trace, summary,
                              loop.now_s, sim_wall_s, loop.num_events, roles=[prefill, attention],
                              role_engines=engines)
    result.ffn = ffn_side       # type: ignore[attr-defined]
    return result


AFD_STEP_COLUMNS = ("afd_a_busy_s", "afd_f_busy_s", "afd_xfer_s", "afd_ep_wait_s", "afd_lanes")


def _add_trace_columns(trace, engines: list[AfdEngine]) -> None:
    """Optional steps-trace columns: A rows get their step's AFD figures, other rows None."""
    cols = getattr(trace, "step_cols", None)
    if not isinstance(cols, dict) or "role" not in cols or "replica_id" not in cols:
        return
    roles, reps = cols["role"], cols["replica_id"]
    queues = [list(reversed(e.stats)) for e in engines]
    if sum(1 for x in roles if x == Role.ATTENTION.value) != sum(len(q) for q in queues):
        return          # rows and priced steps do not pair up: leave the trace as it is
    new = {c: [] for c in AFD_STEP_COLUMNS}
    for role, rep in zip(roles, reps):
        st = queues[rep].pop() if role == Role.ATTENTION.value else None
        for c, attr in zip(AFD_STEP_COLUMNS, ("a_busy_s", "f_busy_s", "xfer_s", "ep_wait_s", "lanes")):
            new[c].append(None if st is None else getattr(st, attr))
    cols.update(new)


def _group_steps(trace, engines: list[AfdEngine]) -> list[list[AfdStepStats]]:
    """The priced A steps grouped by replica step: a lockstep group prices each busy rank of a
    step (one trace row each), an engine of its own prices one. One group per priced step when
    the trace rows and the priced steps do not pair up."""
    flat = [[s] for e in engines for s in e.stats]
    cols = getattr(trace, "step_cols", None)
    if not isinstance(cols, dict) or not {"role", "replica_id", "step"} <= set(cols):
        return flat
    a = Role.ATTENTION.value
    if sum(1 for x in cols["role"] if x == a) != len(flat):
        return flat
    queues = [list(reversed(e.stats)) for e in engines]
    groups: dict[tuple[int, int], list[AfdStepStats]] = {}
    for role, rep, step in zip(cols["role"], cols["replica_id"], cols["step"]):
        if role == a:
            groups.setdefault((rep, step), []).append(queues[rep].pop())
    return list(groups.values())


def afd_summary(prefill, attention, ffn: FfnSide, engines: list[AfdEngine], records, duration_s: float,
                lanes: int, groups: list[list[AfdStepStats]] | None = None) -> dict[str, float | int | str]:
    """Extra summary keys of a P/A/F run: GPUs per role, A/F busy fractions, transfer and EP wait.

    ``groups``: the priced steps per replica step (``_group_steps``; None = one per priced
    step). A work and A-F transfers (a link per A engine) sum over a group's ranks; F work
    and EP wait count once per group, its busiest rank's (every rank is padded to it).
    """
    if groups is None:
        groups = [[s] for e in engines for s in e.stats]
    stats = [s for g in groups for s in g]
    span_a = max(duration_s, 1e-12) * max(attention.resolved.num_engines, 1)
    span_f = max(duration_s, 1e-12) * max(len(engines), 1)
    a_busy = sum(s.a_busy_s for s in stats)
    f_busy = sum(max(s.f_busy_s for s in g) for g in groups)
    xfer = sum(s.xfer_s for s in stats)
    wait = sum(max(s.ep_wait_s for s in g) for g in groups)
    kv = np.asarray([r.kv_transfer_s for r in records] or [0.0]) * 1000
    n_steps, n_groups = max(len(stats), 1), max(len(groups), 1)
    return {
        "architecture": "afd",
        "num_prefill_gpus": prefill.num_gpus,
        "num_attention_gpus": attention.num_gpus,
        "num_ffn_gpus": ffn.num_gpus,
        "num_gpus": prefill.num_gpus + attention.num_gpus + ffn.num_gpus,
        "ffn_gpu": ffn.gpu_name,
        "attention_gpu": attention.resolved.gpu.name,
        "afd_lanes": lanes,
        "attention_lockstep": isinstance(attention.cluster.replicas[0].scheduler, LockstepRanks),
        "num_attention_steps": len(groups),
        "attention_busy_fraction": a_busy / span_a,
        "ffn_busy_fraction": f_busy / span_f,
        "afd_transfer_s": xfer,
        "mean_afd_transfer_ms_per_step": xfer / n_steps * 1000,
        "ep_wait_s": wait,
        "mean_ep_wait_ms_per_step": wait / n_groups * 1000,
        "mean_kv_transfer_ms": float(np.mean(kv)),
        "p99_kv_transfer_ms": float(np.percentile(kv, 99)),
    }
