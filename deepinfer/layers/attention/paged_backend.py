"""The attention backend over the paged KV cache, built on deepinfer.ops.

Each step's metadata is built once (device tensors: slot mapping, block tables, sequence
lengths); each layer then writes its new keys/values with ``ops.write_kv_cache`` and attends
with ``ops.paged_decode_attention`` (requests with one new token, which the runner puts first)
and ``ops.paged_prefill_attention`` (the others). The ops dispatch to Triton kernels on CUDA
and to the torch references on CPU.
"""

from __future__ import annotations

import numpy as np
import torch

from deepinfer import ops
from deepinfer.layers.attention.backend import AttentionBackend, AttentionBatch, AttentionMetadata
from deepinfer.layers.attention.layer import Attention


class PagedAttentionMetadata(AttentionMetadata):
    def __init__(self, backend: "PagedAttentionBackend", kv_caches: list[torch.Tensor], batch: AttentionBatch,
                 device: torch.device) -> None:
        self.backend = backend
        self.kv_caches = kv_caches
        nd = batch.num_decodes
        width = max((len(t) for t in batch.block_tables), default=0)
        tables = np.zeros((batch.num_requests, width), dtype=np.int32)
        for i, blocks in enumerate(batch.block_tables):
            tables[i, : len(blocks)] = blocks
        self.num_decodes = nd
        self.num_decode_tokens = int(batch.query_start_loc[nd])
        self.slot_mapping = torch.from_numpy(batch.slot_mapping).to(device, torch.long)
        self.block_tables = torch.from_numpy(tables).to(device)
        self.seq_lens = torch.from_numpy(batch.seq_lens.astype(np.int32)).to(device)
        prefill_starts = batch.query_start_loc[nd:] - batch.query_start_loc[nd]
        self.prefill_query_start_loc = torch.from_numpy(prefill_starts.astype(np.int32)).to(device)
        self.max_prefill_query_len = int(np.diff(prefill_starts).max()) if len(prefill_starts) > 1 else 0


class PagedAttentionBackend(AttentionBackend):
    name = "paged"
    kv_cache_block_dim = 1

    def kv_cache_shape(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_dim)

    def build_metadata(self, batch: AttentionBatch, kv_caches: list[torch.Tensor],
                       device: torch.device) -> PagedAttentionMetadata:
        return PagedAttentionMetadata(self, kv_caches, batch, device)

    def forward(self, layer: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                metadata: PagedAttentionMetadata) -> torch.Tensor:
        cache = metadata.kv_caches[layer.kv_cache_index]
        ops.write_kv_cache(k, v, cache, metadata.slot_mapping)
        nd, nt = metadata.num_decodes, metadata.num_decode_tokens
        decode_out = prefill_out = None
        if nd:
            decode_out = ops.paged_decode_attention(q[:nt], cache, metadata.block_tables[:nd], metadata.seq_lens[:nd],
                                                    layer.scale, layer.sliding_window)
        if nt < q.shape[0]:
            prefill_out = ops.paged_prefill_attention(
                q[nt:], cache, metadata.block_tables[nd:], metadata.prefill_query_start_loc, metadata.seq_lens[nd:],
                metadata.max_prefill_query_len, layer.scale, layer.sliding_window,
            )
        if prefill_out is None:
            return decode_out
        if decode_out is None:
            return prefill_out
        return torch.cat((decode_out, prefill_out))
