"""Attention over the paged KV cache: decode (one query per request) and prefill (many).

Both read keys and values only from the cache, so ``write_kv_cache`` runs first with the new
tokens. Layout: ``kv_cache`` [2, num_blocks, block_size, kv_heads, head_dim]; request ``b``'s
tokens live in blocks ``block_tables[b, :]`` (int32, padded with 0); it has ``seq_lens[b]``
tokens after this step. The cache may be stored in float8 e4m3 (``kv_cache_dtype="fp8"``): keys
and values are then read back as the query's dtype. Grouped-query attention: query head ``h``
reads KV head ``h // (heads // kv_heads)``. ``sliding_window`` w: a query at position p sees keys at
positions p - w < j <= p.

The references gather each request's blocks into a dense tensor and call
``F.scaled_dot_product_attention`` (torch's fused CPU/GPU kernel is the best tool for dense
attention; the gather is what a paged kernel avoids). In batch-invariant mode the decode
reference reduces keys in the same fixed splits as the Triton kernel instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepinfer.ops.dispatch import get_op
from deepinfer.ops.step_memo import StepMemo

DECODE_SPLIT_SIZE = 256
"""Keys per split of the split-KV decode kernel. Fixed (not tuned per batch) so that a
request's attention is reduced in the same order whatever else is in the batch."""


def _visible(q_pos: torch.Tensor, k_pos: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    visible = k_pos <= q_pos
    if sliding_window is not None:
        visible &= k_pos > q_pos - sliding_window
    return visible




_decode_memo = StepMemo()


def gather_kv(kv_cache: torch.Tensor, index: tuple, dtype: torch.dtype) -> torch.Tensor:
    """``kv_cache[index]`` in ``dtype``. A float8 cache is indexed through a byte view (torch's
    CPU indexing has no float8 kernels) and converted after the gather."""
    if kv_cache.element_size() == 1 and kv_cache.is_floating_point():
        return kv_cache.view(torch.uint8)[index].view(kv_cache.dtype).to(dtype)
    return kv_cache[index].to(dtype)


def _split_layout(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                  sliding_window: int | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per split of DECODE_SPLIT_SIZE keys: the block ids to gather [B, blocks] and which of its
    keys each row sees [B, 1, 1, split]. The same for every layer of a step (memoized)."""
    batch = block_tables.shape[0]
    split = max(DECODE_SPLIT_SIZE, block_size)
    blocks_per_split = split // block_size
    lens = seq_lens.long()[:, None, None, None]
    layout = []
    for s in range(-(-int(seq_lens.max()) // split)):
        cols = block_tables[:, s * blocks_per_split:(s + 1) * blocks_per_split].long()
        if cols.shape[1] < blocks_per_split:  # the table ends inside this split: pad with the null block
            cols = torch.cat((cols, cols.new_zeros(batch, blocks_per_split - cols.shape[1])), 1)
        pos = torch.arange(s * split, (s + 1) * split, device=seq_lens.device)[None, None, None, :]
        layout.append((cols, _visible(lens - 1, pos, sliding_window) & (pos < lens)))
    return layout


def _split_decode_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                            seq_lens: torch.Tensor, scale: float, sliding_window: int | None) -> torch.Tensor:
    """Split-KV like the Triton kernel: keys in fixed splits of DECODE_SPLIT_SIZE from position 0,
    each reduced on its own (a fixed-shape matmul and fixed-length max/sum), then merged in
    order. A split past a row's length (or before its window) changes nothing bit for bit
    (weight exp(-inf) = 0, rescale exp(0) = 1), and a lone split is merged by the same
    arithmetic (x * 1 + 0), so a row's result does not depend on the longest row of its batch:
    the reference is batch-invariant."""
    batch, heads, head_dim = query.shape
    kv_heads, block_size = kv_cache.shape[-2], kv_cache.shape[2]
    layout = _decode_memo.get((block_tables, seq_lens, block_size, sliding_window, "splits"),
                              lambda: _split_layout(block_tables, seq_lens, block_size, sliding_window))
    q = query.reshape(batch, kv_heads, heads // kv_heads, head_dim).float()
    m = l = acc = None
    for cols, visible in layout:
        kv = gather_kv(kv_cache, (slice(None), cols), torch.float32).flatten(2, 3).permute(0, 1, 3, 2, 4)
        scores = (torch.matmul(q, kv[0].transpose(-1, -2)) * scale).masked_fill(~visible, float("-inf"))
        m_s = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.where(m_s > float("-inf"), m_s, 0.0))
        l_s, pv = p.sum(-1, keepdim=True), torch.matmul(p, kv[1])  # unnormalized: merged exactly below
        if m is None:
            m, l, acc = m_s, l_s, pv
            continue
        m_new = torch.maximum(m, m_s)
        finite = torch.where(m_new > float("-inf"), m_new, 0.0)
        w_old, w_new = torch.exp(m - finite), torch.exp(m_s - finite)
        acc, l, m = acc * w_old + pv * w_new, l * w_old + l_s * w_new, m_new
    out = (acc / torch.where(l > 0, l, 1.0)).reshape(batch, heads, head_dim)
    return out.to(query.dtype)


def _dense_layout(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                  sliding_window: int | None):
    """(block ids to gather, visibility mask [B, 1, 1, L], whether some row is padding)."""
    num_blocks = -(-int(seq_lens.max()) // block_size)
    lens = seq_lens.long()[:, None]
    k_pos = torch.arange(num_blocks * block_size, device=seq_lens.device)[None, :]
    visible = _visible(lens - 1, k_pos, sliding_window) & (k_pos < lens)
    return block_tables[:, :num_blocks].long(), visible[:, None, None, :], bool((seq_lens == 0).any())


def paged_decode_attention_ref(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                               seq_lens: torch.Tensor, scale: float, sliding_window: int | None,
                               batch_invariant: bool = False) -> torch.Tensor:
    """Gathers the batch's keys up to its longest row and runs SDPA (the fast CPU path); with
    ``batch_invariant``, the fixed-split reduction instead (about 3x slower for short contexts,
    since every split is DECODE_SPLIT_SIZE keys long)."""
    batch, heads, head_dim = query.shape
    kv_heads, block_size = kv_cache.shape[-2], kv_cache.shape[2]
    if batch == 0 or not bool(seq_lens.any()):
        return torch.zeros_like(query)
    if batch_invariant:
        return _split_decode_attention(query, kv_cache, block_tables, seq_lens, scale, sliding_window)
    blocks, visible, has_padding = _decode_memo.get(
        (block_tables, seq_lens, block_size, sliding_window),
        lambda: _dense_layout(block_tables, seq_lens, block_size, sliding_window),
    )
    # One gather for keys and values: [2, B, blocks, block_size, Hk, D] -> [2, B, Hk, L, D].
    kv = gather_kv(kv_cache, (slice(None), blocks), query.dtype).flatten(2, 3).transpose(2, 3)
    # GQA without repeating keys: the query heads of one KV head act as its query rows.
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    out = F.scaled_dot_product_attention(grouped, kv[0], kv[1], attn_mask=visible, scale=scale)
    out = out.reshape(batch, heads, head_dim)
    return torch.where(seq_lens[:, None, None] > 0, out, 0.0) if has_padding else out


def paged_decode_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                           seq_lens: torch.Tensor, scale: float, sliding_window: int | None = None,
                           batch_invariant: bool = False) -> torch.Tensor:
    """query [B, heads, head_dim], the token at position ``seq_lens[b] - 1`` of each request ->
    attention output [B, heads, head_dim]. A row with ``seq_lens[b] == 0`` (CUDA-graph padding)
    gives zeros. ``batch_invariant``: a row's result must not depend on the other rows (the Triton
    kernel always is; the reference then switches to its fixed-split path)."""
    return get_op("paged_decode_attention", query.device.type)(query, kv_cache, block_tables, seq_lens, scale,
                                                              sliding_window, batch_invariant)


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
