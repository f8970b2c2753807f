"""Drive the REAL vLLM 0.33 scheduler with a P/D KV connector (the decode and prefill sides).

``PullConnector`` is the scheduler half of NixlConnector's pull mode, reduced to what the
scheduler sees (``nixl/pull_scheduler.py``): ``get_num_new_matched_tokens`` returns
``(len(prompt) - local hit, async=True)`` for a request with ``do_remote_prefill``;
``update_state_after_alloc`` clears ``do_remote_prefill`` (one transfer per request);
``request_finished`` asks to delay the free (``do_remote_decode``). Worker-side methods are
no-ops. Transfers complete by a fixed rule: request ``i`` (list order) is reported in
``finished_recving`` (D) / ``finished_sending`` (P) by the ``DELAYS[i % len(DELAYS)]``-th
``update_from_output`` after the schedule() that admitted (D) / finished (P) it; the
mirror run in ``test_pd_parity`` applies the same rule. With mamba KV cache groups (``STATE``:
Gated DeltaNet states) NixlConnector's one-token backoff applies (``_prefill_backoff``): a P-side
prompt loses its last token when added (``on_new_request`` -> ``_truncate_request_for_prefill``)
and D loads all but the prompt's last token (``_get_remote_prefill_token_count``).

``run_vllm_pd(..., num_speculative_tokens=k, accepted=...)`` adds EAGLE speculative decoding on
the same scheduler (``vllm_driver._EagleRunner``; see ``run_vllm_pd``). What vLLM does differently
there: load admission without lookahead slots but with a spec-step reservation, promoted requests
padded to ``(1 + k, k)`` with rejected placeholder drafts, legacy block hashes with the EAGLE
last-block drop (``_check_pd_eagle_scheduler``).

``run_vllm_pd(..., kv_groups=(...))`` runs a hybrid KV cache (``vllm_driver``'s ``kv_groups``: one
KV cache group per entry over one pool, 0 = full attention, W > 0 = a sliding window of W tokens)
with ``HMAPullConnector``: the same connector plus ``SupportsHMA``, which vLLM requires of a
connector next to the hybrid KV cache manager (``VllmConfig`` turns the manager off for a connector
without it; ``KVConnectorFactory.create_connector`` refuses one while it is on; the scheduler's
``_connector_finished`` asserts a single group for one). ``request_finished_all_groups`` gets the
block ids of every group (``get_block_ids_for_computed_tokens``, after
``remove_skipped_blocks`` nulled the out-of-window blocks) and delays the free by NixlConnector's
rule: ``any(len(group) > 0 for group in block_ids)`` (``NixlPullConnectorScheduler.request_finished``,
the method NixlConnector's ``request_finished`` and ``request_finished_all_groups`` both call; every
group's list is cut to the computed tokens' block count, null blocks kept, so all lists have one
length). Checked on the built scheduler (``_check_pd_hybrid_scheduler``).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Sequence

from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    SupportsHMA,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request, RequestStatus

import vllm_driver as base

DELAYS = (1, 3, 2, 5, 0, 4)


def _delay_free(request: Request, block_ids: tuple[list[int], ...]) -> tuple[bool, None]:
    """NixlPullConnectorScheduler.request_finished's decision: a P-side request (do_remote_decode)
    finished by length or stop keeps its blocks until finished_sending if it holds any."""
    params = request.kv_transfer_params or {}
    if params.get("do_remote_decode") and request.status in (
        RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED
    ):
        return any(len(group) > 0 for group in block_ids), None    # delay_free_blocks
    return False, None


class PullConnector(KVConnectorBase_V1):
    # ---- scheduler side
    def _backoff(self) -> int:
        """``NixlBaseScheduler._prefill_backoff`` without a drafter: 1 with mamba (state) groups."""
        config = self._kv_cache_config
        return 1 if config is not None and config.has_mamba_layers else 0

    def on_new_request(self, request):
        """``NixlBaseScheduler._truncate_request_for_prefill``: a prefill-side request's prompt
        loses its last ``_backoff()`` tokens (once), max_tokens 1."""
        backoff, params = self._backoff(), request.kv_transfer_params
        if (backoff and params is not None and params.get("do_remote_decode")
                and not params.get("_p_side_truncated") and request.num_prompt_tokens > backoff):
            del request.prompt_token_ids[-backoff:]
            del request._all_token_ids[-backoff:]
            request.num_prompt_tokens -= backoff
            request.max_tokens = 1
            params["_p_side_truncated"] = True

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = request.kv_transfer_params or {}
        if params.get("do_remote_prefill"):
            # NixlPullConnectorScheduler: _get_remote_prefill_token_count(len(prompt)) - computed
            n, backoff = len(request.prompt_token_ids or []), self._backoff()
            count = (n - backoff if backoff and n > backoff else n) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill"):
            params["do_remote_prefill"] = False

    def build_connector_meta(self, scheduler_output):
        return KVConnectorMetadata()

    def request_finished(self, request, block_ids):
        return _delay_free(request, (block_ids,))    # as NixlConnector.request_finished: one group

    # ---- worker side (never called: no worker)
    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass


class HMAPullConnector(PullConnector, SupportsHMA):
    """``PullConnector`` for a hybrid KV cache (module docstring): the scheduler hands it the
    block ids of every KV cache group when a request finishes."""

    def request_finished_all_groups(self, request, block_ids):
        return _delay_free(request, block_ids)

    def get_loaded_kv_cache_group_ids(self, request):
        # as NixlBaseConnector: a load of the request's own blocks restores every transfer group
        # (here the same groups as the base default, the prefix-cacheable ones: all of them)
        return self._kv_cache_config.transfer_group_ids


def _check_pd_hybrid_scheduler(scheduler: Any) -> None:
    """The hybrid KV cache manager stays on with the connector: it supports HMA (what
    ``VllmConfig`` asks before turning the manager off for a connector, and what the scheduler
    asks before calling ``request_finished_all_groups``), and no model feature turns it off (chunked
    local attention). On this CPU ``VllmConfig`` still resolves ``disable_hybrid_kv_cache_manager``
    to True (the ``UnspecifiedPlatform`` has no hybrid KV cache; ``vllm_driver`` module docstring):
    neither the scheduler nor this connector reads it. The groups themselves are checked by
    ``vllm_driver._check_kv_groups`` when the scheduler is built."""
    config = scheduler.vllm_config
    effective = {
        "connector": type(scheduler.connector).__name__,
        "connector_supports_hma": isinstance(scheduler.connector, SupportsHMA),
        "config_supports_hma": KVConnectorFactory.supports_hma_config(config.kv_transfer_config),
        "attention_chunk_size": config.model_config.attention_chunk_size,
    }
    wanted = {
        "connector": HMAPullConnector.__name__,
        "connector_supports_hma": True,
        "config_supports_hma": True,
        "attention_chunk_size": None,
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM resolved the hybrid KV cache + connector differently: wanted {wanted}, "
                           f"got {effective}")


def _check_pd_eagle_scheduler(scheduler: Any, k: int, block_size: int) -> None:
    """What vLLM 0.33 resolves for EAGLE *with* a KV connector, on top of
    ``vllm_driver._check_eagle_scheduler`` (num_spec = num_lookahead = k, prefill lookahead 1,
    no draft slots, model runner V2, can_skip_drafts, no dynamic SD):

    * ``num_hash_lookahead_tokens`` 0 (``VllmConfig.num_hash_lookahead_tokens``: "KV connectors
      keep the legacy hashes"), so ``use_eagle_block_drop`` stays True: a local prefix-cache hit
      drops its last matched block (legacy EAGLE drop) when prefix caching is on;
    * ``_spec_decode_step_blocks`` = cdiv(1 + k + k, block_size) (one full-attention group),
      reserved when admitting an async KV load.
    """
    effective = {
        "num_hash_lookahead_tokens": scheduler.num_hash_lookahead_tokens,
        "use_eagle_block_drop": scheduler.use_eagle_block_drop,
        "kv_manager_drops_eagle_block": bool(scheduler.kv_cache_manager.coordinator.drop_eagle_group_ids),
        "spec_decode_step_blocks": scheduler._spec_decode_step_blocks,
    }
    wanted = {
        "num_hash_lookahead_tokens": 0,
        "use_eagle_block_drop": True,
        "kv_manager_drops_eagle_block": True,
        "spec_decode_step_blocks": -(-(1 + 2 * k) // block_size),
    }
    if effective != wanted:
        raise RuntimeError(f"vLLM resolved EAGLE + KV connector differently: wanted {wanted}, got {effective}")


def new_pd_scheduler(*, num_gpu_blocks: int, num_speculative_tokens: int = 0, kv_groups: tuple[int, ...] = (),
                     **knobs: Any) -> tuple[Any, Any]:
    """The scheduler ``run_vllm_pd`` drives (PullConnector, watermark 0) and its block hasher;
    with ``num_speculative_tokens`` > 0 also the EAGLE drafter, checked by
    ``vllm_driver._check_eagle_scheduler`` and ``_check_pd_eagle_scheduler``. ``kv_groups``
    (non-empty): ``vllm_driver``'s hybrid KV cache groups with ``HMAPullConnector``, checked by
    ``_check_pd_hybrid_scheduler``."""
    kv_groups = tuple(kv_groups)
    connector = HMAPullConnector.__name__ if kv_groups else PullConnector.__name__
    config = KVTransferConfig(kv_connector=connector, kv_role="kv_both",
                              kv_connector_module_path="vllm_pd_driver")
    spec_knobs = {"num_speculative_tokens": num_speculative_tokens} if num_speculative_tokens else {}
    group_knobs = {"kv_groups": kv_groups} if kv_groups else {}
    scheduler, block_hasher = base.new_scheduler(num_gpu_blocks=num_gpu_blocks, watermark=0.0,
                                                 kv_transfer_config=config, **spec_knobs, **group_knobs, **knobs)
    if num_speculative_tokens:
        _check_pd_eagle_scheduler(scheduler, num_speculative_tokens, knobs["block_size"])
    if kv_groups:
        _check_pd_hybrid_scheduler(scheduler)
    return scheduler, block_hasher


def run_vllm_pd(
    requests: Sequence[Any], *, side: str, num_gpu_blocks: int, max_steps: int = 200_000,
    num_speculative_tokens: int = 0, accepted: Callable[[str, int, int], int] | None = None,
    kv_groups: tuple[int, ...] = (), **knobs: Any
) -> tuple[list[dict[str, Any]], list[int]]:
    """Run one side ("decode": do_remote_prefill, "prefill": do_remote_decode with max_tokens=1).

    Returns (trace of executed steps, free blocks after every update_from_output).

    ``num_speculative_tokens`` = k > 0: EAGLE speculative decoding as in
    ``vllm_driver.run_vllm_spec_scheduler`` (same ``accepted(request_id, context_len,
    real_drafts)`` contract, required then), on the same scheduler as the PullConnector: the
    fake model runner V2 is ``vllm_driver._EagleRunner``; the sync loop hands the runner's
    drafts to ``update_draft_token_ids`` after every step that scheduled tokens
    (``EngineCore.post_step``), the async loop takes none. Trace entries become
    ``{request_id: (num_scheduled_tokens, num_scheduled_spec_tokens)}``. A decode-side request
    promoted after its KV load is a new request to model runner V2 (it is in
    ``scheduled_new_reqs``: status WAITING), so its padded first step (1 + k, k) has no real
    drafts: the GPU rejects them (``gather_draft_sampled``: the step starts inside the
    prefill) and it samples 1 token.

    ``kv_groups``: the KV cache groups of ``vllm_driver`` (module docstring; empty: one
    full-attention group and the plain ``PullConnector``); with a drafter only Gated DeltaNet
    state groups (``STATE`` / ``STATE_ALIGN``) and full attention.
    """
    k = num_speculative_tokens
    if k and accepted is None:
        raise ValueError("num_speculative_tokens > 0 needs accepted(request_id, context_len, real_drafts)")
    scheduler, block_hasher = new_pd_scheduler(num_gpu_blocks=num_gpu_blocks, num_speculative_tokens=k,
                                               kv_groups=kv_groups, **knobs)
    if k:
        runner: Any = base._EagleRunner(scheduler, accepted)
    else:
        runner = base._OneTokenRunner(scheduler)   # base._fake_sample / base._record, no drafts
    delay: dict[str, int] = {}
    for index, req in enumerate(requests):
        params = {"do_remote_prefill": True} if side == "decode" else {"do_remote_decode": True}
        delay[req.request_id] = DELAYS[index % len(DELAYS)]
        scheduler.add_request(Request(
            request_id=req.request_id, prompt_token_ids=base._prompt_ids(req, index),
            sampling_params=SamplingParams(
                max_tokens=req.output_len if side == "decode" else 1, ignore_eos=True,
                extra_args={"kv_transfer_params": params}),
            pooling_params=None, arrival_time=0.0, priority=req.priority, block_hasher=block_hasher))
    pending: dict[str, int] = {}        # request id -> updates left before its transfer is reported
    trace: list[dict[str, Any]] = []
    free: list[int] = []
    pool = scheduler.kv_cache_manager.block_pool

    def after_schedule(out: Any) -> None:
        if side == "decode":
            for rid, r in scheduler.requests.items():
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS and rid not in pending and rid not in done:
                    pending[rid] = delay[rid]

    done: set[str] = set()

    def update(out: Any, sampled: Any) -> None:
        ready = [rid for rid, left in pending.items() if left <= 0]
        for rid in ready:
            del pending[rid]
            done.add(rid)
        for rid in pending:
            pending[rid] -= 1
        if ready:
            key = "finished_recving" if side == "decode" else "finished_sending"
            sampled.kv_connector_output = KVConnectorOutput(**{key: set(ready)})
        outputs = scheduler.update_from_output(out, sampled)
        if side == "prefill":
            for eco in outputs.values():
                for o in eco.outputs:
                    if o.finish_reason is not None:
                        pending[o.request_id] = delay[o.request_id]
        free.append(pool.get_num_free_blocks())

    queue: deque = deque()
    for _ in range(max_steps):
        busy = scheduler.has_requests() or queue or pending
        if not busy:
            return trace, free
        if knobs["async_scheduling"]:
            if scheduler.has_requests() or pending:
                out = scheduler.schedule()
                after_schedule(out)
                queue.appendleft((runner.execute(out), out))
                runner.record(trace, out)
                if len(queue) < 2 and (out.total_num_scheduled_tokens > 0 or scheduler.has_requests()):
                    continue
            elif not queue:
                continue
            sampled, out = queue.pop()
            update(out, sampled)
        else:
            out = scheduler.schedule()
            after_schedule(out)
            sampled = runner.execute(out)
            runner.record(trace, out)
            update(out, sampled)
            if out.total_num_scheduled_tokens > 0:   # EngineCore.post_step(model_executed)
                drafts = runner.take_draft_token_ids()
                if drafts is not None:
                    scheduler.update_draft_token_ids(drafts)
    raise RuntimeError(f"vLLM scheduler still busy after {max_steps} steps")
