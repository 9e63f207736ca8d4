"""KV manager: a paged block pool with prefix caching, and per-request state slots.

Two pools, one admission. The block pool holds the paged KV cache (a block table per request);
the slot pool holds fixed-size per-request state (sliding-window rings, compressor state of
the DeepSeek-V4.1 family; for plain attention models a slot is just the request's row in
per-request device tables). A request is admitted only if both its blocks and its slot can be
reserved, and ``allocate`` reserves both or neither.

Prefix caching: every full block of computed tokens gets a hash that chains the hash of the
block before it with this block's token ids, so equal hashes mean equal prefixes. A hit is
verified against the stored parent hash and token ids, so a hash collision can never serve
another prompt's KV. Freed blocks keep their hash and go to the tail of the free queue;
allocation takes from the head, so the least recently freed cached block is evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import xxhash

from deepinfer.engine.request import Request

NULL_BLOCK_ID = 0
"""Block 0 is never allocated: padded block-table entries and padded tokens point at it."""


def hash_block(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """128-bit hash of a full block, chained to its parent block's hash."""
    h = xxhash.xxh3_128()
    h.update((parent_hash or 0).to_bytes(16, "little"))
    h.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    return h.intdigest()


@dataclass
class KVBlock:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None
    """Set once the block is full of computed tokens and registered in the prefix cache."""
    parent_hash: int | None = None
    token_ids: tuple[int, ...] | None = None
    """The block's tokens, kept to verify a hash hit."""

    def forget_hash(self) -> None:
        self.block_hash = self.parent_hash = self.token_ids = None


@dataclass
class PrefixCacheStats:
    """Prompt tokens looked up in the prefix cache and how many were found."""

    queries: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class BlockPool:
    """Fixed set of KV blocks with reference counts, a free queue in LRU order and a hash index."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 2:
            raise ValueError(f"the KV cache needs at least 2 blocks (one is reserved), got {num_blocks}")
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(1, num_blocks))
        self.cached: dict[int, int] = {}
        """block hash -> block id, for full blocks whose KV is computed."""

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_usable(self) -> int:
        return len(self.blocks) - 1

    def allocate(self, count: int) -> list[int]:
        """Take ``count`` blocks from the head of the free queue, evicting their cached hashes."""
        if count > self.num_free:
            raise RuntimeError(f"asked for {count} KV blocks with {self.num_free} free")
        ids = []
        for _ in range(count):
            block_id, _ = self.free_queue.popitem(last=False)
            block = self.blocks[block_id]
            if block.block_hash is not None and self.cached.get(block.block_hash) == block_id:
                del self.cached[block.block_hash]
            block.forget_hash()
            block.ref_count = 1
            ids.append(block_id)
        return ids

    def touch(self, block_ids: list[int]) -> None:
        """Take a reference on cached blocks (a prefix hit); a free one leaves the free queue."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_queue[block_id]
            block.ref_count += 1

    def release(self, block_ids: list[int]) -> None:
        """Drop one reference from each block; blocks that reach zero join the free queue's tail."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[block_id] = None

    def lookup(self, block_hash: int, parent_hash: int | None, token_ids: tuple[int, ...]) -> int | None:
        block_id = self.cached.get(block_hash)
        if block_id is None:
            return None
        block = self.blocks[block_id]
        if block.parent_hash != parent_hash or block.token_ids != token_ids:
            return None  # a hash collision: never serve another prefix's KV
        return block_id

    def register(self, block_id: int, block_hash: int, parent_hash: int | None, token_ids: tuple[int, ...]) -> None:
        block = self.blocks[block_id]
        block.block_hash, block.parent_hash, block.token_ids = block_hash, parent_hash, token_ids
        # Two requests that computed the same prefix at once: the first one registered stays the
        # cache entry; the other block is still valid for its owner, just not shared.
        self.cached.setdefault(block_hash, block_id)


class StateSlotPool:
    """Fixed number of per-request state slots (row indices into per-request device buffers)."""

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        return self._free.pop()

    def release(self, slot: int) -> None:
        self._free.append(slot)


class KVManager:
    """Block tables and state slots of all running requests; the scheduler's only view of memory."""

    def __init__(self, num_blocks: int, block_size: int, num_state_slots: int, enable_prefix_caching: bool) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self.slots = StateSlotPool(num_state_slots)
        self.stats = PrefixCacheStats()
        self._block_ids: dict[str, list[int]] = {}
        self._slot: dict[str, int] = {}
        self._num_hashed_blocks: dict[str, int] = {}
        self._block_hashes: dict[str, list[int]] = {}

    # ---- queries -------------------------------------------------------------------------
    def block_ids(self, request_id: str) -> list[int]:
        return self._block_ids.get(request_id, [])

    def state_slot(self, request_id: str) -> int:
        return self._slot[request_id]

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @property
    def usage(self) -> float:
        """Fraction of usable blocks that hold a running request's KV."""
        return 1.0 - self.pool.num_free / self.pool.num_usable

    # ---- prefix cache ----------------------------------------------------------------------
    def _full_block_hashes(self, request: Request, num_blocks: int) -> list[int]:
        """Hash chain of the request's first ``num_blocks`` full blocks (memoized per request)."""
        hashes = self._block_hashes.setdefault(request.request_id, [])
        bs = self.block_size
        while len(hashes) < num_blocks:
            i = len(hashes)
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, tuple(request.all_token_ids[i * bs : (i + 1) * bs])))
        return hashes

    def find_cached_prefix(self, request: Request) -> list[int]:
        """Block ids of the longest cached prefix of ``request`` (full blocks only).

        The last token is always left to compute, because its logits give the next token.
        """
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        num_full = (request.num_tokens - 1) // bs
        hashes = self._full_block_hashes(request, num_full)
        hit: list[int] = []
        parent = None
        for i, block_hash in enumerate(hashes[:num_full]):
            block_id = self.pool.lookup(block_hash, parent, tuple(request.all_token_ids[i * bs : (i + 1) * bs]))
            if block_id is None:
                break
            hit.append(block_id)
            parent = block_hash
        return hit

    def cache_computed_blocks(self, request: Request) -> None:
        """Register the request's blocks that are now full of computed KV in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        rid = request.request_id
        # Computed KV may run ahead of the known tokens (an in-flight token); a block's hash
        # needs all of its tokens.
        num_full = min(request.num_computed_tokens, request.num_tokens) // self.block_size
        start = self._num_hashed_blocks.get(rid, 0)
        if num_full <= start:
            return
        hashes = self._full_block_hashes(request, num_full)
        blocks = self._block_ids[rid]
        bs = self.block_size
        for i in range(start, num_full):
            parent = hashes[i - 1] if i else None
            self.pool.register(blocks[i], hashes[i], parent, tuple(request.all_token_ids[i * bs : (i + 1) * bs]))
        self._num_hashed_blocks[rid] = num_full

    # ---- allocation ------------------------------------------------------------------------
    def allocate(self, request: Request, num_new_tokens: int, cached_blocks: list[int] | tuple = ()) -> bool:
        """Reserve what ``request`` needs to compute ``num_new_tokens`` more tokens: all or nothing.

        On admission ``cached_blocks`` are its prefix-cache hits, and a state slot is reserved too.
        Returns False (and changes nothing) when the pool cannot hold it.
        """
        rid = request.request_id
        owned = self._block_ids.get(rid, [])
        total_tokens = request.num_computed_tokens + len(cached_blocks) * self.block_size + num_new_tokens
        num_new_blocks = self.blocks_needed(total_tokens) - len(owned) - len(cached_blocks)
        # Hits on blocks nobody holds take those blocks out of the free queue.
        num_revived = sum(1 for b in cached_blocks if self.pool.blocks[b].ref_count == 0)
        if max(num_new_blocks, 0) + num_revived > self.pool.num_free:
            return False
        needs_slot = rid not in self._slot
        if needs_slot and self.slots.num_free == 0:
            return False
        self.pool.touch(list(cached_blocks))
        owned = owned + list(cached_blocks)
        if num_new_blocks > 0:
            owned += self.pool.allocate(num_new_blocks)
        self._block_ids[rid] = owned
        if needs_slot:  # admission: count the lookup once, now that it succeeded
            self._slot[rid] = self.slots.allocate()
            if self.enable_prefix_caching:
                self.stats.queries += request.num_tokens
                self.stats.hits += len(cached_blocks) * self.block_size
        if cached_blocks:
            self._num_hashed_blocks[rid] = len(cached_blocks)
        return True

    def free(self, request: Request) -> None:
        """Release the request's blocks (tail blocks first, so they are evicted first) and its slot."""
        rid = request.request_id
        self.pool.release(list(reversed(self._block_ids.pop(rid, []))))
        slot = self._slot.pop(rid, None)
        if slot is not None:
            self.slots.release(slot)
        self._num_hashed_blocks.pop(rid, None)

    def forget(self, request: Request) -> None:
        """Drop the memoized hashes of a finished request."""
        self._block_hashes.pop(request.request_id, None)
