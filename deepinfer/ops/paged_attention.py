"""Attention over the paged KV cache: decode (one query per request) and prefill (many).

Both read keys and values only from the cache, so ``write_kv_cache`` runs first with the new
tokens. Layout: ``kv_cache`` [2, num_blocks, block_size, kv_heads, head_dim]; request ``b``'s
tokens live in blocks ``block_tables[b, :]`` (int32, padded with 0); it has ``seq_lens[b]``
tokens after this step. The cache may be stored in float8 e4m3 (``kv_cache_dtype="fp8"``): keys
and values are then read back as the query's dtype. Grouped-query attention: query head ``h`` reads KV head
``h // (heads // kv_heads)``. ``sliding_window`` w: a query at position p sees keys at
positions p - w < j <= p.

The prefill reference gathers each request's blocks into a dense tensor and calls
``F.scaled_dot_product_attention`` (torch's fused CPU/GPU kernel is the best tool for dense
attention; the gather is what a paged kernel avoids). The decode reference reduces keys in the
same fixed splits as the Triton kernel, which makes it batch-invariant.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepinfer.ops.dispatch import get_op

DECODE_SPLIT_SIZE = 256
"""Keys per split of the split-KV decode kernel. Fixed (not tuned per batch) so that a
request's attention is reduced in the same order whatever else is in the batch."""


def _visible(q_pos: torch.Tensor, k_pos: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    visible = k_pos <= q_pos
    if sliding_window is not None:
        visible &= k_pos > q_pos - sliding_window
    return visible




def gather_kv(kv_cache: torch.Tensor, index: tuple, dtype: torch.dtype) -> torch.Tensor:
    """``kv_cache[index]`` in ``dtype``. A float8 cache is indexed through a byte view (torch's
    CPU indexing has no float8 kernels) and converted after the gather."""
    if kv_cache.element_size() == 1 and kv_cache.is_floating_point():
        return kv_cache.view(torch.uint8)[index].view(kv_cache.dtype).to(dtype)
    return kv_cache[index].to(dtype)


def paged_decode_attention_ref(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                               seq_lens: torch.Tensor, scale: float, sliding_window: int | None) -> torch.Tensor:
    """Split-KV like the Triton kernel: keys in fixed splits of DECODE_SPLIT_SIZE from position 0,
    each reduced on its own (a fixed-shape matmul and fixed-length max/sum), then merged in
    order. A split past a row's length (or before its window) changes nothing bit for bit
    (weight exp(-inf) = 0, rescale exp(0) = 1), so a row's result does not depend on the longest
    row of its batch: the reference is batch-invariant."""
    batch, heads, head_dim = query.shape
    kv_heads, block_size = kv_cache.shape[-2], kv_cache.shape[2]
    if batch == 0 or not bool(seq_lens.any()):
        return torch.zeros_like(query)
    group = heads // kv_heads
    split = max(DECODE_SPLIT_SIZE, block_size)
    blocks_per_split = split // block_size
    num_splits = -(-int(seq_lens.max()) // split)
    lens = seq_lens.long()[:, None, None, None]
    q = query.reshape(batch, kv_heads, group, head_dim).float()
    dev = query.device
    m = torch.full((batch, kv_heads, group, 1), float("-inf"), device=dev)
    l = torch.zeros((batch, kv_heads, group, 1), device=dev)
    acc = torch.zeros((batch, kv_heads, group, head_dim), device=dev)
    for s in range(num_splits):
        cols = block_tables[:, s * blocks_per_split:(s + 1) * blocks_per_split].long()
        if cols.shape[1] < blocks_per_split:  # the table ends inside this split: pad with the null block
            cols = torch.cat((cols, cols.new_zeros(batch, blocks_per_split - cols.shape[1])), 1)
        kv = gather_kv(kv_cache, (slice(None), cols), torch.float32).flatten(2, 3).permute(0, 1, 3, 2, 4)
        pos = torch.arange(s * split, (s + 1) * split, device=dev)[None, None, None, :]
        visible = _visible(lens - 1, pos, sliding_window) & (pos < lens)
        scores = torch.matmul(q, kv[0].transpose(-1, -2)) * scale  # [B, Hk, G, split]
        scores = scores.masked_fill(~visible, float("-inf"))
        m_s = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.where(m_s > float("-inf"), m_s, 0.0))
        l_s = p.sum(-1, keepdim=True)
        o_s = torch.matmul(p, kv[1]) / torch.where(l_s > 0, l_s, 1.0)
        m_new = torch.maximum(m, m_s)
        finite = torch.where(m_new > float("-inf"), m_new, 0.0)
        w_old, w_new = torch.exp(m - finite), torch.exp(m_s - finite) * l_s
        acc = acc * w_old + o_s * w_new
        l = l * w_old + w_new
        m = m_new
    out = (acc / torch.where(l > 0, l, 1.0)).reshape(batch, heads, head_dim)
    return out.to(query.dtype)


def paged_decode_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                           seq_lens: torch.Tensor, scale: float, sliding_window: int | None = None) -> torch.Tensor:
    """query [B, heads, head_dim], the token at position ``seq_lens[b] - 1`` of each request ->
    attention output [B, heads, head_dim]. A row with ``seq_lens[b] == 0`` (CUDA-graph padding)
    gives zeros."""
    return get_op("paged_decode_attention", query.device.type)(query, kv_cache, block_tables, seq_lens, scale,
                                                              sliding_window)


def paged_prefill_attention_ref(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                                query_start_loc: torch.Tensor, seq_lens: torch.Tensor, max_query_len: int,
                                scale: float, sliding_window: int | None) -> torch.Tensor:
    heads, kv_heads = query.shape[1], kv_cache.shape[-2]
    block_size = kv_cache.shape[2]
    out = torch.empty_like(query)
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    for b, ctx in enumerate(lens):
        q0, q1 = starts[b], starts[b + 1]
        if q1 == q0:
            continue
        blocks = block_tables[b, : -(-ctx // block_size)].long()
        keys, values = (gather_kv(kv_cache, (i, blocks), query.dtype).flatten(0, 1)[:ctx].transpose(0, 1)
                        for i in (0, 1))  # [Hk, ctx, D]
        q_pos = torch.arange(ctx - (q1 - q0), ctx, device=query.device)[:, None]
        visible = _visible(q_pos, torch.arange(ctx, device=query.device)[None, :], sliding_window)
        o = F.scaled_dot_product_attention(query[q0:q1].transpose(0, 1), keys, values, attn_mask=visible,
                                           scale=scale, enable_gqa=heads != kv_heads)
        out[q0:q1] = o.transpose(0, 1)
    return out


def paged_prefill_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                            query_start_loc: torch.Tensor, seq_lens: torch.Tensor, max_query_len: int,
                            scale: float, sliding_window: int | None = None) -> torch.Tensor:
    """Variable-length causal attention: query [T, heads, head_dim] holds the new tokens of each
    request back to back (request ``b``: rows ``query_start_loc[b]:query_start_loc[b+1]`` (int32),
    the last tokens of its ``seq_lens[b]``); earlier tokens (prefix-cache hits, earlier chunks)
    are read from the cache. ``max_query_len`` (a host int, so no device sync is needed) bounds
    the rows of any one request. Returns [T, heads, head_dim]."""
    return get_op("paged_prefill_attention", query.device.type)(query, kv_cache, block_tables, query_start_loc,
                                                               seq_lens, max_query_len, scale, sliding_window)
