"""FreeBlockQueue (the never-taken blocks as one run node) keeps the order of a plain list model
under random takes, removals (fresh blocks too), appends and prepends."""

import random

import pytest

from simulator.kv_cache.block_pool import FreeBlockQueue


@pytest.mark.parametrize("seed", range(40))
def test_queue_matches_a_list_model(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 30)
    q, model = FreeBlockQueue(n), list(range(n))
    for _ in range(120):
        taken = [b for b in range(n) if b not in model]
        op = rng.random()
        if op < 0.3 and model:
            k = rng.randint(0, len(model))
            assert q.popleft_n(k) == model[:k]
            del model[:k]
        elif op < 0.45 and model:
            assert q.popleft() == model.pop(0)
        elif op < 0.6 and model:
            b = rng.choice(model)
            q.remove(b)
            model.remove(b)
        elif op < 0.8 and taken:
            blocks = rng.sample(taken, rng.randint(1, len(taken)))
            q.append_n(blocks)
            model += blocks
        elif taken:
            blocks = rng.sample(taken, rng.randint(1, len(taken)))
            q.prepend_n(blocks)
            model[:0] = blocks
        assert q.order() == model and q.num_free_blocks == len(model)
        assert [b for b in range(n) if b in q] == sorted(model)


def test_taking_more_than_free_and_removing_a_taken_block_fail():
    q = FreeBlockQueue(4)
    assert q.popleft_n(2) == [0, 1] and q.popleft() == 2
    with pytest.raises(ValueError, match="cannot take 2 blocks, 1 free"):
        q.popleft_n(2)
    with pytest.raises(RuntimeError, match="block 1 is not in the free queue"):
        q.remove(1)
    assert q.popleft() == 3
    with pytest.raises(ValueError, match="cannot take 1 block, 0 free"):
        q.popleft()
    q.append_n([2, 0])
    assert q.order() == [2, 0] and 0 in q and 3 not in q
