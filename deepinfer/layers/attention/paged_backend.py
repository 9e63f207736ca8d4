"""The attention backend over the paged KV cache, built on deepinfer.ops.

Each step's metadata is built once (device tensors: slot mapping, block tables, sequence
lengths); each layer then writes its new keys/values with ``ops.write_kv_cache`` and attends
with ``ops.paged_decode_attention`` (requests with one new token, which the runner puts first)
and ``ops.paged_prefill_attention`` (the others). The ops dispatch to Triton kernels on CUDA
and to the torch references on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from deepinfer import ops
from deepinfer.layers.attention.backend import AttentionBackend, AttentionBatch, AttentionMetadata
from deepinfer.layers.attention.layer import Attention
from deepinfer.transfer import to_device


@dataclass
class PagedAttentionMetadata(AttentionMetadata):
    backend: "PagedAttentionBackend"
    kv_caches: list[torch.Tensor]
    slot_mapping: torch.Tensor
    """[T] long; negative for padding tokens (not written)."""
    block_tables: torch.Tensor
    """[B, width] int32."""
    seq_lens: torch.Tensor
    """[B] int32; 0 for padding rows."""
    num_decodes: int
    """The first num_decodes requests have one query token each."""
    prefill_query_start_loc: torch.Tensor
    """[num_prefills + 1] int32, relative to the first prefill token."""
    max_prefill_query_len: int

    def __post_init__(self) -> None:
        # Sliced once per step, not once per layer: the CPU references memoize per-step work on
        # the identity of these tensors.
        nd = self.num_decodes
        self.decode_block_tables, self.prefill_block_tables = self.block_tables[:nd], self.block_tables[nd:]
        self.decode_seq_lens, self.prefill_seq_lens = self.seq_lens[:nd], self.seq_lens[nd:]


def block_table_array(block_tables: list[list[int]], width: int | None = None) -> np.ndarray:
    """Block tables padded with the null block 0 to a [B, width] int32 array."""
    width = max((len(t) for t in block_tables), default=0) if width is None else width
    table = np.zeros((len(block_tables), width), dtype=np.int32)
    for i, blocks in enumerate(block_tables):
        table[i, : len(blocks)] = blocks
    return table


def per_token_batch(batch: AttentionBatch) -> AttentionBatch:
    """The same step with every query token as its own one-token "request" (its request's block
    table, its own position + 1 as length): batch-invariant mode runs all tokens through the decode
    reduction, so a token's attention does not depend on how its prompt was chunked or batched."""
    counts = np.diff(batch.query_start_loc)
    owner = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(int(batch.query_start_loc[-1])) - np.repeat(batch.query_start_loc[:-1], counts)
    seq_lens = (np.repeat(batch.seq_lens - counts, counts) + within + 1).astype(np.int64)
    return AttentionBatch(query_start_loc=np.arange(len(owner) + 1), seq_lens=seq_lens,
                          block_tables=[batch.block_tables[i] for i in owner], slot_mapping=batch.slot_mapping,
                          num_decodes=len(owner), block_size=batch.block_size)


class PagedAttentionBackend(AttentionBackend):
    name = "paged"
    kv_cache_block_dim = 1
    batch_invariant = False
    """Set by the worker in batch-invariant mode (see ``per_token_batch``)."""

    def kv_cache_shape(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_dim)

    def build_metadata(self, batch: AttentionBatch, kv_caches: list[torch.Tensor],
                       device: torch.device) -> PagedAttentionMetadata:
        if self.batch_invariant and batch.num_decodes < batch.num_requests:
            batch = per_token_batch(batch)
        nd = batch.num_decodes
        prefill_starts = batch.query_start_loc[nd:] - batch.query_start_loc[nd]
        return PagedAttentionMetadata(
            backend=self,
            kv_caches=kv_caches,
            slot_mapping=to_device(batch.slot_mapping, device, torch.long),
            block_tables=to_device(block_table_array(batch.block_tables), device),
            seq_lens=to_device(batch.seq_lens, device, torch.int32),
            num_decodes=nd,
            prefill_query_start_loc=to_device(prefill_starts, device, torch.int32),
            max_prefill_query_len=int(np.diff(prefill_starts).max()) if len(prefill_starts) > 1 else 0,
        )

    def graph_metadata(self, kv_caches: list[torch.Tensor], slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                       seq_lens: torch.Tensor) -> PagedAttentionMetadata:
        return PagedAttentionMetadata(
            backend=self, kv_caches=kv_caches, slot_mapping=slot_mapping, block_tables=block_tables,
            seq_lens=seq_lens, num_decodes=len(seq_lens),
            prefill_query_start_loc=torch.zeros(1, dtype=torch.int32, device=seq_lens.device),
            max_prefill_query_len=0,
        )

    def forward(self, layer: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                metadata: PagedAttentionMetadata) -> torch.Tensor:
        cache = metadata.kv_caches[layer.kv_cache_index]
        ops.write_kv_cache(k, v, cache, metadata.slot_mapping)
        nd = metadata.num_decodes
        decode_out = prefill_out = None
        if nd:
            decode_out = ops.paged_decode_attention(q[:nd], cache, metadata.decode_block_tables,
                                                    metadata.decode_seq_lens, layer.scale, layer.sliding_window,
                                                    self.batch_invariant)
        if nd < q.shape[0]:
            prefill_out = ops.paged_prefill_attention(
                q[nd:], cache, metadata.prefill_block_tables, metadata.prefill_query_start_loc,
                metadata.prefill_seq_lens, metadata.max_prefill_query_len, layer.scale, layer.sliding_window,
            )
        if prefill_out is None:
            return decode_out
        if decode_out is None:
            return prefill_out
        return torch.cat((decode_out, prefill_out))
