"""Plain-torch attention over the paged KV cache: the reference backend, and the CPU path.

Decodes (one query token each) are batched: their blocks are gathered into one padded
[B, L] key/value tensor and one SDPA call attends with a length mask. Prefill chunks go one
request at a time; a chunk with no earlier KV attends to its own keys with ``is_causal``,
one that continues a cached prefix or an earlier chunk gathers its context from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from deepinfer.layers.attention.backend import AttentionBackend, AttentionBatch, AttentionMetadata
from deepinfer.layers.attention.layer import Attention


@dataclass
class _PrefillChunk:
    q_start: int
    q_end: int
    context_len: int
    """Tokens of KV this request has after the step (cached prefix + earlier chunks + this one)."""
    block_ids: torch.Tensor

    @property
    def query_len(self) -> int:
        return self.q_end - self.q_start


class TorchAttentionMetadata(AttentionMetadata):
    def __init__(self, backend: "TorchAttentionBackend", kv_caches: list[torch.Tensor], batch: AttentionBatch,
                 device: torch.device) -> None:
        self.backend = backend
        self.kv_caches = kv_caches
        self.slot_mapping = torch.from_numpy(batch.slot_mapping).to(device, torch.long)
        self.num_decodes = nd = batch.num_decodes
        self.decode_seq_lens = torch.from_numpy(batch.seq_lens[:nd]).to(device, torch.long)
        width = max((len(t) for t in batch.block_tables[:nd]), default=0)
        table = torch.zeros(nd, width, dtype=torch.long)
        for i, blocks in enumerate(batch.block_tables[:nd]):
            table[i, : len(blocks)] = torch.tensor(blocks, dtype=torch.long)
        self.decode_block_tables = table.to(device)
        self.decode_context_width = width * batch.block_size
        self.prefills: list[_PrefillChunk] = []
        qsl = batch.query_start_loc
        for i in range(nd, batch.num_requests):
            ctx = int(batch.seq_lens[i])
            num_blocks = -(-ctx // batch.block_size)
            blocks = torch.tensor(batch.block_tables[i][:num_blocks], dtype=torch.long, device=device)
            self.prefills.append(_PrefillChunk(int(qsl[i]), int(qsl[i + 1]), ctx, blocks))
        self._masks: dict[tuple, torch.Tensor] = {}

    def decode_mask(self, window: int | None) -> torch.Tensor:
        """[B, 1, 1, L] bool: key position j is visible to the query at position len-1."""
        key = ("decode", window)
        if key not in self._masks:
            pos = torch.arange(self.decode_context_width, device=self.decode_seq_lens.device)
            lens = self.decode_seq_lens[:, None]
            visible = pos[None, :] < lens
            if window is not None:
                visible &= pos[None, :] > lens - 1 - window
            self._masks[key] = visible[:, None, None, :]
        return self._masks[key]

    def prefill_mask(self, index: int, window: int | None) -> torch.Tensor:
        """[q, ctx] bool causal mask for a chunk whose queries are the last q of ctx positions."""
        key = ("prefill", index, window)
        if key not in self._masks:
            chunk = self.prefills[index]
            device = chunk.block_ids.device
            q_pos = torch.arange(chunk.context_len - chunk.query_len, chunk.context_len, device=device)[:, None]
            k_pos = torch.arange(chunk.context_len, device=device)[None, :]
            visible = k_pos <= q_pos
            if window is not None:
                visible &= k_pos > q_pos - window
            self._masks[key] = visible
        return self._masks[key]


class TorchAttentionBackend(AttentionBackend):
    name = "torch"
    kv_cache_block_dim = 1

    def kv_cache_shape(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_dim)

    def build_metadata(self, batch: AttentionBatch, kv_caches: list[torch.Tensor],
                       device: torch.device) -> TorchAttentionMetadata:
        return TorchAttentionMetadata(self, kv_caches, batch, device)

    def forward(self, layer: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                metadata: TorchAttentionMetadata) -> torch.Tensor:
        cache = metadata.kv_caches[layer.kv_cache_index]
        hk, d = layer.num_kv_heads, layer.head_dim
        flat = cache.view(2, -1, hk, d)
        flat[0].index_copy_(0, metadata.slot_mapping, k)
        flat[1].index_copy_(0, metadata.slot_mapping, v)
        window = layer.sliding_window
        nd = metadata.num_decodes
        out = None if nd == q.shape[0] else torch.empty_like(q)

        if nd:
            # One gather for keys and values: [2, B, blocks, block_size, Hk, D] -> [2, B, Hk, L, D].
            kv = cache[:, metadata.decode_block_tables].flatten(2, 3).transpose(2, 3)
            # GQA without repeating keys: the query heads of one KV head act as its query rows.
            grouped = q[:nd].reshape(nd, hk, layer.num_heads // hk, d)
            o = F.scaled_dot_product_attention(grouped, kv[0], kv[1], attn_mask=metadata.decode_mask(window),
                                               scale=layer.scale)
            o = o.reshape(nd, layer.num_heads, d)
            if out is None:
                return o
            out[:nd] = o

        key_cache, value_cache = cache[0], cache[1]
        gqa = hk != layer.num_heads
        for i, chunk in enumerate(metadata.prefills):
            sl = slice(chunk.q_start, chunk.q_end)
            queries = q[sl].transpose(0, 1)  # [Hq, q, D]
            only_own_keys = chunk.context_len == chunk.query_len
            if only_own_keys:
                keys, values = k[sl], v[sl]
            else:
                keys = key_cache[chunk.block_ids].flatten(0, 1)[: chunk.context_len]
                values = value_cache[chunk.block_ids].flatten(0, 1)[: chunk.context_len]
            plain_causal = only_own_keys and (window is None or chunk.query_len <= window)
            o = F.scaled_dot_product_attention(
                queries, keys.transpose(0, 1), values.transpose(0, 1),
                attn_mask=None if plain_causal else metadata.prefill_mask(i, window),
                is_causal=plain_causal, scale=layer.scale, enable_gqa=gqa,
            )
            out[sl] = o.transpose(0, 1)
        return out
