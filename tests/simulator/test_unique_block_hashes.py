"""Block hashes of a unique prompt, and the replica's unchecked BatchShape, equal the plain forms.

A request whose prompt is unique hashes block i as ``hash((("u", request_id), i))`` (see
`simulator.request`), whether its blocks fill one at a time (an output token) or many at once
(the prompt at creation, a lazy request's materialised tokens). `BatchShape.of_step` builds a
scheduler step's shape without the constructor's checks: it must be the same value.
"""

from __future__ import annotations

from simulator.batch_engine import BatchShape
from simulator.request import Request, RequestSpec


def _expected(rid: str, n: int) -> list[int]:
    return [hash((("u", rid), i)) for i in range(n)]


def test_unique_prompt_hashes_one_block_at_a_time_and_in_bulk():
    r = Request.from_spec(RequestSpec("q7", 0.0, 40, 100), block_size=16)
    assert r.block_hashes == _expected("q7", 2)           # 40 prompt tokens: 2 full blocks
    for _ in range(8):                                     # 48 tokens: the third block fills
        r.append_output_token()
    assert r.block_hashes == _expected("q7", 3)
    r._update_block_hashes(100)                           # bulk: blocks 3..5
    assert r.block_hashes == _expected("q7", 6)
    r._update_block_hashes(100)                           # nothing new
    r._update_block_hashes(111)                           # still 6 full blocks
    assert r.block_hashes == _expected("q7", 6)
    r._update_block_hashes(112)                           # exactly one more
    assert r.block_hashes == _expected("q7", 7)


def test_batch_shape_of_step_equals_the_checked_constructor():
    new, ctx = (1, 1, 37), (900, 12, 0)
    a, b = BatchShape(new, ctx), BatchShape.of_step(new, ctx)
    assert a == b and hash(a) == hash(b) and {a: "x"}[b] == "x"
    assert (b.new_tokens, b.context_lens, b.num_tokens, b.num_reqs) == (new, ctx, 39, 3)
