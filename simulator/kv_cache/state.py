"""KV cache manager for Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next) without prefix caching,
mirroring vLLM 0.33's ``KVCacheCoordinatorNoPrefixCache`` over one ``FullAttentionManager`` and
the ``MambaManager`` of each GDN group in the "none" mamba cache mode.

In that mode (``--no-enable-prefix-caching``: vLLM's "align" mode needs prefix caching, and the
"none" mode forbids it) a GDN group's block holds one request's recurrent state, and its block
size is ``max_model_len`` (``mamba_block_size``), so ``get_num_blocks_to_allocate`` gives
ceil(tokens / max_model_len) = 1 block the first time a request is given slots (admission, or
resumption after a preemption) and none later (1 + k with a drafter of k drafts: vLLM counts k x
max_model_len more tokens); ``remove_skipped_blocks`` frees nothing (the
skipped tokens, computed - 1, stay under one block) and the block goes back to the pool with the
request's others when it finishes or is preempted. The full-attention group is the one-group
manager's (``KVCacheManager``): its admission counts include the state blocks (vLLM sums every
group's blocks), nothing else changes for a running request, so the scheduler's inline fast
paths stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.kv_cache.manager import KVCacheManager
from simulator.request import Request


class StateKVCacheManager(KVCacheManager):
    """One full-attention block table per request plus 1 + k state blocks per GDN group.

    num_state_groups: vLLM's mamba KV cache groups (Qwen3.5: 3, each of a quarter of the layers).
    num_speculative_blocks: k, the drafts of a drafter (MTP): vLLM gives each GDN group k more
        blocks per request (``MambaSpec.num_speculative_blocks``: a verify writes the state after
        each draft token, ``get_num_blocks_to_allocate`` counts k x max_model_len more tokens).
    Prefix caching is off (vLLM's "none" mamba cache mode allows none).
    """

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, num_state_groups: int,
                 watermark: float = 0.0, num_speculative_blocks: int = 0) -> None:
        super().__init__(num_gpu_blocks, block_size, max_model_len, enable_prefix_caching=False,
                         watermark=watermark)
        if num_state_groups < 1:
            raise ValueError(f"num_state_groups={num_state_groups}; must be >= 1")
        if num_speculative_blocks < 0:
            raise ValueError(f"num_speculative_blocks={num_speculative_blocks}; must be >= 0")
        self.num_state_groups = num_state_groups
        self.blocks_per_request = num_state_groups * (1 + num_speculative_blocks)
        self.state_blocks: dict[str, list[int]] = {}

    def _num_blocks_to_allocate(self, request_id: str, num_tokens: int, hit_blocks: list[int]) -> int:
        """The full group's blocks, plus the state blocks while the request holds none."""
        need = super()._num_blocks_to_allocate(request_id, num_tokens, hit_blocks)
        return need if request_id in self.state_blocks else need + self.blocks_per_request

    def allocate_slots(self, request: Request, num_new_tokens: int, *args, **kwargs) -> list[int] | None:
        """``KVCacheManager.allocate_slots``; a request given its first slots also takes its state
        blocks (vLLM allocates group by group, the GDN groups first: block ids do not matter
        without prefix caching, only their count)."""
        new = super().allocate_slots(request, num_new_tokens, *args, **kwargs)
        rid = request.request_id
        if new is not None and rid not in self.state_blocks:
            state = self.pool.get_new_blocks(self.blocks_per_request)
            self.state_blocks[rid] = state
            new = state + new
        return new

    def _pop_blocks(self, request: Request) -> list[int]:
        """The state blocks (vLLM lists the GDN groups first), then the full-attention table: freed
        (or, behind a KV connector with async scheduling, deferred) as one list, tail first."""
        return self.state_blocks.pop(request.request_id, []) + super()._pop_blocks(request)

    def check_invariants(self, requests: Iterable[Request] = ()) -> None:
        """``KVCacheManager.check_invariants``, and every request holding full-attention blocks
        holds its state blocks."""
        for rid in self.req_to_blocks:
            if len(self.state_blocks.get(rid, ())) != self.blocks_per_request:
                raise AssertionError(f"request {rid} holds {len(self.state_blocks.get(rid, ()))} state blocks, "
                                     f"not {self.blocks_per_request}")
        super().check_invariants(requests)

    def _num_held_blocks(self) -> int:
        return super()._num_held_blocks() + sum(len(b) for b in self.state_blocks.values())
