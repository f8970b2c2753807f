"""Drive the REAL vLLM 0.33 scheduler with a P/D KV connector (the decode and prefill sides).

``PullConnector`` is the scheduler half of NixlConnector's pull mode, reduced to what the
scheduler sees (``nixl/pull_scheduler.py``): ``get_num_new_matched_tokens`` returns
``(len(prompt) - local hit, async=True)`` for a request with ``do_remote_prefill``;
``update_state_after_alloc`` clears ``do_remote_prefill`` (one transfer per request);
``request_finished`` asks to delay the free (``do_remote_decode``). Worker-side methods are
no-ops. Transfers complete by a fixed rule: request ``i`` (list order) is reported in
``finished_recving`` (D) / ``finished_sending`` (P) by the ``DELAYS[i % len(DELAYS)]``-th
``update_from_output`` after the schedule() that admitted (D) / finished (P) it; the
mirror run in ``test_pd_parity`` applies the same rule.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request, RequestStatus

import vllm_driver as base

DELAYS = (1, 3, 2, 5, 0, 4)


class PullConnector(KVConnectorBase_V1):
    # ---- scheduler side
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = request.kv_transfer_params or {}
        if params.get("do_remote_prefill"):
            count = len(request.prompt_token_ids or []) - num_computed_tokens
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
        params = request.kv_transfer_params or {}
        if params.get("do_remote_decode") and request.status in (
            RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED
        ):
            return len(block_ids) > 0, None       # NixlConnector: delay_free_blocks
        return False, None

    # ---- worker side (never called: no worker)
    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass


def run_vllm_pd(
    requests: Sequence[Any], *, side: str, num_gpu_blocks: int, max_steps: int = 200_000, **knobs: Any
) -> tuple[list[dict[str, int]], list[int]]:
    """Run one side ("decode": do_remote_prefill, "prefill": do_remote_decode with max_tokens=1).

    Returns (trace of executed steps, free blocks after every update_from_output).
    """
    config = KVTransferConfig(kv_connector="PullConnector", kv_role="kv_both",
                              kv_connector_module_path="vllm_pd_driver")
    scheduler, block_hasher = base.new_scheduler(num_gpu_blocks=num_gpu_blocks, watermark=0.0,
                                                 kv_transfer_config=config, **knobs)
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
    trace: list[dict[str, int]] = []
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
                queue.appendleft((base._fake_sample(scheduler, out), out))
                base._record(trace, out)
                if len(queue) < 2 and (out.total_num_scheduled_tokens > 0 or scheduler.has_requests()):
                    continue
            elif not queue:
                continue
            sampled, out = queue.pop()
            update(out, sampled)
        else:
            out = scheduler.schedule()
            after_schedule(out)
            sampled = base._fake_sample(scheduler, out)
            base._record(trace, out)
            update(out, sampled)
    raise RuntimeError(f"vLLM scheduler still busy after {max_steps} steps")
