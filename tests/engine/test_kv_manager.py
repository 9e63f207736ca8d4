"""The KV manager: block pool, prefix cache (hash chain, verification, LRU), state slots."""

from __future__ import annotations

import pytest

from deepinfer.engine import kv_manager as kvm
from deepinfer.engine.kv_manager import KVManager
from deepinfer.engine.request import Request
from deepinfer.sampling_params import SamplingParams

BS = 4


def make_request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, SamplingParams(max_tokens=8), sampling_seed=0, eos_token_ids=frozenset(),
                   max_model_len=1000, arrival_order=0)


def admit(kv: KVManager, req: Request) -> list[int]:
    """Admit like the scheduler does and mark the whole prompt computed."""
    hit = kv.find_cached_prefix(req)
    assert kv.allocate(req, req.num_tokens - len(hit) * BS, hit)
    req.num_computed_tokens = req.num_tokens
    kv.cache_computed_blocks(req)
    return hit


def test_blocks_cover_tokens_and_block_zero_is_reserved():
    kv = KVManager(num_blocks=10, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    req = make_request("a", list(range(10)))
    admit(kv, req)
    assert len(kv.block_ids("a")) == 3
    assert 0 not in kv.block_ids("a")
    assert kv.pool.num_free == 9 - 3


def test_prefix_hit_shares_blocks_and_counts_hit_rate():
    kv = KVManager(num_blocks=20, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    a = make_request("a", list(range(13)))
    admit(kv, a)
    b = make_request("b", list(range(9)) + [99, 98, 97])
    hit = admit(kv, b)
    assert hit == kv.block_ids("a")[:2]  # tokens 0..7 are two full shared blocks
    assert kv.pool.blocks[hit[0]].ref_count == 2
    assert kv.stats.hits == 8 and kv.stats.queries == 13 + 12


def test_last_token_is_never_served_from_cache():
    kv = KVManager(num_blocks=20, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    admit(kv, make_request("a", list(range(8))))
    hit = kv.find_cached_prefix(make_request("b", list(range(8))))
    assert len(hit) == 1, "an identical 8-token prompt reuses one block and recomputes the last one"


def test_hash_collision_is_detected(monkeypatch):
    kv = KVManager(num_blocks=20, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    monkeypatch.setattr(kvm, "hash_block", lambda parent, tokens: 42)  # every block collides
    admit(kv, make_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9]))
    assert kv.find_cached_prefix(make_request("b", [9, 9, 9, 9, 5, 6, 7, 8, 9])) == []


def test_freed_cached_blocks_are_reused_lru_and_evicted_when_needed():
    kv = KVManager(num_blocks=7, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    a = make_request("a", list(range(9)))  # 3 blocks, 2 of them full and cached
    admit(kv, a)
    a_blocks = kv.block_ids("a")
    kv.free(a)
    assert kv.pool.num_free == 6
    # A hit revives the freed blocks.
    b = make_request("b", list(range(8)) + [50])
    assert admit(kv, b) == a_blocks[:2]
    kv.free(b)
    # Filling the pool with unrelated requests evicts the cached blocks, oldest freed first.
    c = make_request("c", [100 + i for i in range(24)])
    admit(kv, c)
    assert kv.find_cached_prefix(make_request("d", list(range(8)) + [1])) == []
    assert set(a_blocks) <= set(kv.block_ids("c")), "c took over every block a had"


def test_eviction_prefers_tail_blocks_of_a_chain():
    kv = KVManager(num_blocks=8, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    a = make_request("a", list(range(17)))  # 5 blocks: 4 full
    admit(kv, a)
    kv.free(a)
    # Two new blocks are needed: they come from never-used blocks first, then from a's tail.
    e = make_request("e", [200 + i for i in range(12)])
    admit(kv, e)
    hit = kv.find_cached_prefix(make_request("f", list(range(17))))
    assert len(hit) >= 2, "the head of the chain survives longer than its tail"


def test_admission_is_atomic_over_blocks_and_slots():
    kv = KVManager(num_blocks=20, block_size=BS, num_state_slots=1, enable_prefix_caching=True)
    admit(kv, make_request("a", [1, 2, 3]))
    free_before = kv.pool.num_free
    b = make_request("b", [4, 5, 6])
    assert not kv.allocate(b, 3), "no state slot left, so no admission"
    assert kv.pool.num_free == free_before, "and no block was taken"
    assert kv.block_ids("b") == []


def test_allocation_fails_without_side_effects_when_pool_is_full():
    kv = KVManager(num_blocks=4, block_size=BS, num_state_slots=4, enable_prefix_caching=False)
    a = make_request("a", list(range(8)))
    assert kv.allocate(a, 8)
    b = make_request("b", list(range(8)))
    assert not kv.allocate(b, 8)
    assert kv.pool.num_free == 1 and kv.slots.num_free == 3
    kv.free(a)
    assert kv.allocate(b, 8)


def test_prefix_caching_off_never_hits():
    kv = KVManager(num_blocks=20, block_size=BS, num_state_slots=4, enable_prefix_caching=False)
    admit(kv, make_request("a", list(range(12))))
    assert kv.find_cached_prefix(make_request("b", list(range(12)))) == []
    assert kv.stats.queries == 0


def test_pool_needs_two_blocks():
    with pytest.raises(ValueError, match="at least 2 blocks"):
        KVManager(num_blocks=1, block_size=BS, num_state_slots=1, enable_prefix_caching=True)


def test_prefix_lookups_count_once_per_successful_admission():
    kv = KVManager(num_blocks=5, block_size=BS, num_state_slots=4, enable_prefix_caching=True)
    admit(kv, make_request("a", list(range(12))))
    before = (kv.stats.queries, kv.stats.hits)
    big = make_request("b", list(range(8)) + list(range(100, 120)))
    for _ in range(3):  # a blocked head of the queue is looked up every step
        hit = kv.find_cached_prefix(big)
        assert not kv.allocate(big, big.num_tokens - len(hit) * BS, hit)
    assert (kv.stats.queries, kv.stats.hits) == before
