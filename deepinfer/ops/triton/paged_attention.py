"""Triton attention over the paged KV cache: split-KV decode and flash-attention prefill.

Both kernels read keys and values through the block table one tile of ``BLOCK_N`` tokens at a
time: token ``t`` of request ``b`` lives in slot ``t % block_size`` of physical block
``block_tables[b, t // block_size]``, so a tile may span several cache blocks (or part of one)
and the tile size is independent of ``block_size``. Softmax is online in float32, in base 2
(scores are scaled by ``scale * log2(e)`` inside ``exp2``'s argument, one FMA per score).

A float8 (e4m3) cache is converted to the query's dtype as each tile is loaded, so it costs half
the bytes of a 16-bit one and nothing in accuracy beyond its own rounding.

Grouped-query attention: a program owns one KV head and processes all query heads of its group
together, so each key/value tile is loaded once for the whole group.

Decode (one query per request) is "flash-decoding": the keys of a request are cut into splits of
``DECODE_SPLIT_SIZE`` tokens, each reduced on its own to a normalized partial output and its
log-sum-exp, and a second kernel merges the splits. The split kernel's grid is (request, KV head,
slot); the slots of a request stride over its splits that hold a visible key, so splits past
``seq_len`` (all of them for a padding row) cost nothing. The grid and the temporary buffers
depend only on tensor shapes (never on ``seq_lens``' values), so the op can be captured in a CUDA
graph, and a request's result does not depend on the rest of the batch.

Prefill is flash-attention over variable-length requests: one program per (query block, KV head,
request); key tiles wholly outside the causal/sliding-window band are never visited, and only
the tiles that straddle its edges pay for the mask.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from deepinfer.ops.paged_attention import DECODE_SPLIT_SIZE

_LOG2E = 1.4426950408889634

# Running max starts finite so a row whose first tiles are fully masked (possible in prefill with
# a sliding window) keeps exp2(m_old - m_new) = 1 instead of exp2(-inf + inf) = NaN.
_M_INIT = tl.constexpr(-1.0e30)

# Tile sizes (module-level so tests can shrink them). All are powers of two.
DECODE_BLOCK_N = 64  # keys per tile in decode; DECODE_SPLIT_SIZE must be a multiple of it
DECODE_MIN_ROWS = 16  # a group's query heads are padded to this many rows: tl.dot needs M >= 16
DECODE_COMBINE_CHUNK = 16  # splits merged per step by the combine kernel
# Split-kernel programs per multiprocessor to aim for. Each (request, KV head) gets
# cdiv(target, batch * kv_heads) programs (at most one per split) that stride over its splits, so
# a grid sized for max_model_len does not launch mostly-empty programs.
DECODE_PROGRAMS_PER_SM = 16
PREFILL_BLOCK_M = 128  # query rows (tokens x heads of the group) per prefill program
PREFILL_BLOCK_N = 64  # keys per tile in prefill


# --------------------------------------------------------------------------------------------
# Shared device helpers
# --------------------------------------------------------------------------------------------

@triton.jit
def _load_kv_tile(k_ptr, v_ptr, bt_row_ptr, tok, kv_head, stride_blk, stride_tok, stride_head,
                  BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, tok_valid, MASKED: tl.constexpr):
    """Keys and values [len(tok), HEAD_DIM] of the tokens ``tok`` of one request and KV head.

    Masked tokens read as zeros: slots past a request's length may never have been written (and
    could hold NaN bit patterns, which would survive a zero softmax weight in p @ v), and block
    table entries past its end may lie beyond the row.
    """
    offs_d = tl.arange(0, HEAD_DIM)
    if MASKED:
        blk = tl.load(bt_row_ptr + tok // BLOCK_SIZE, mask=tok_valid, other=0)
    else:
        blk = tl.load(bt_row_ptr + tok // BLOCK_SIZE)
    rows = blk.to(tl.int64) * stride_blk + (tok % BLOCK_SIZE) * stride_tok + kv_head * stride_head
    offs = rows[:, None] + offs_d[None, :]
    if MASKED:
        k = tl.load(k_ptr + offs, mask=tok_valid[:, None], other=0.0)
        v = tl.load(v_ptr + offs, mask=tok_valid[:, None], other=0.0)
    else:
        k = tl.load(k_ptr + offs)
        v = tl.load(v_ptr + offs)
    return k, v


@triton.jit
def _online_softmax_step(s, qk_scale, v, m_i, l_i, acc, DOT_PRECISION: tl.constexpr):
    """Fold one tile of raw scores ``s`` = q.k [M, N] (masked entries -inf) and values ``v``
    [N, D] into the running base-2 max ``m_i``, denominator ``l_i`` and unnormalized output
    ``acc``. Scaling inside exp2's argument makes it one FMA per score."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _first_visible_key(q_pos, window, USE_WINDOW: tl.constexpr):
    """Lowest key position a query at ``q_pos`` sees: q_pos - window < j."""
    if USE_WINDOW:
        return tl.maximum(q_pos - window + 1, 0)
    else:
        return q_pos * 0


@triton.jit
def _decode_split_range(seq_len, window, SPLIT_SIZE: tl.constexpr, USE_WINDOW: tl.constexpr):
    """Splits [first, end) of a decode row that hold a visible key; empty when seq_len == 0.
    The split kernel writes exactly these and the combine kernel reads exactly these."""
    first = _first_visible_key(seq_len - 1, window, USE_WINDOW) // SPLIT_SIZE
    return first, tl.cdiv(seq_len, SPLIT_SIZE)


# --------------------------------------------------------------------------------------------
# Decode
# --------------------------------------------------------------------------------------------

@triton.jit
def _decode_split_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, part_out_ptr, part_lse_ptr,
                         qk_scale, window, num_splits, stride_qb, stride_qh, stride_bt,
                         stride_blk, stride_tok, stride_head,
                         GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_SIZE: tl.constexpr, SPLIT_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                         USE_WINDOW: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One (request, KV head, program slot): attention of the group's query heads over the
    splits first + slot, first + slot + slots, ... of the request's visible splits.

    Each split is reduced on its own (same tiles, same order, whatever the grid), giving a
    normalized partial output and its base-2 log-sum-exp per query head. Splits without a
    visible key (past seq_len, before the window; all of them for a padding row) are never
    visited, so a grid sized for the longest possible request costs little on short ones.
    """
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    slot = tl.program_id(2)
    slots = tl.num_programs(2)

    seq_len = tl.load(seq_lens_ptr + b)
    first_split, end_split = _decode_split_range(seq_len, window, SPLIT_SIZE, USE_WINDOW)
    if first_split + slot >= end_split:
        return
    first_key = _first_visible_key(seq_len - 1, window, USE_WINDOW)

    rows = tl.arange(0, BLOCK_H)
    row_valid = rows < GROUP  # the group is padded to BLOCK_H rows for tl.dot
    heads = kv_head * GROUP + rows
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=row_valid[:, None], other=0.0)
    bt_row_ptr = bt_ptr + b.to(tl.int64) * stride_bt
    # Partial buffers are [B, heads, num_splits(, D)], float32.
    part_rows = (b.to(tl.int64) * (tl.num_programs(1) * GROUP) + heads) * num_splits

    for split in range(first_split + slot, end_split, slots):
        split_start = split * SPLIT_SIZE
        m_i = tl.full([BLOCK_H], _M_INIT, tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
        # Tiles are BLOCK_N-aligned; the first one holds first_key or split_start, so every
        # visited tile has at least one visible key.
        lo = tl.maximum(split_start, first_key // BLOCK_N * BLOCK_N)
        hi = tl.minimum(split_start + SPLIT_SIZE, seq_len)
        for start in range(lo, hi, BLOCK_N):
            tok = start + tl.arange(0, BLOCK_N)
            visible = (tok < seq_len) & (tok >= first_key)
            k, v = _load_kv_tile(k_ptr, v_ptr, bt_row_ptr, tok, kv_head, stride_blk, stride_tok, stride_head,
                                 BLOCK_SIZE, HEAD_DIM, visible, True)
            k, v = k.to(q.dtype), v.to(q.dtype)  # a float8 cache is read back in the query's dtype
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
            s = tl.where(visible[None, :], s, float("-inf"))
            m_i, l_i, acc = _online_softmax_step(s, qk_scale, v, m_i, l_i, acc, DOT_PRECISION)
        tl.store(part_out_ptr + (part_rows + split)[:, None] * HEAD_DIM + offs_d[None, :], acc / l_i[:, None],
                 mask=row_valid[:, None])
        tl.store(part_lse_ptr + part_rows + split, m_i + tl.math.log2(l_i), mask=row_valid)


@triton.jit
def _decode_combine_kernel(part_out_ptr, part_lse_ptr, seq_lens_ptr, out_ptr, window, num_splits,
                           stride_ob, stride_oh, HEAD_DIM: tl.constexpr, SPLIT_SIZE: tl.constexpr,
                           CHUNK: tl.constexpr, USE_WINDOW: tl.constexpr):
    """One (request, query head): merge the partial outputs of the splits that the split kernel
    wrote (the same range it derives from seq_len and the window), weighted by exp2(lse)."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + b)
    first_split, end_split = _decode_split_range(seq_len, window, SPLIT_SIZE, USE_WINDOW)  # empty: zeros

    offs_d = tl.arange(0, HEAD_DIM)
    row = (b.to(tl.int64) * tl.num_programs(1) + head) * num_splits
    m = tl.full([], _M_INIT, tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for c in range(first_split, end_split, CHUNK):
        splits = c + tl.arange(0, CHUNK)
        exists = splits < end_split
        lse = tl.load(part_lse_ptr + row + splits, mask=exists, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, 0))
        alpha = tl.math.exp2(m - m_new)
        w = tl.math.exp2(lse - m_new)
        o = tl.load(part_out_ptr + (row + splits)[:, None] * HEAD_DIM + offs_d[None, :], mask=exists[:, None],
                    other=0.0)
        acc = acc * alpha + tl.sum(w[:, None] * o, 0)
        l = l * alpha + tl.sum(w, 0)
        m = m_new
    out = acc / tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty))


# --------------------------------------------------------------------------------------------
# Prefill
# --------------------------------------------------------------------------------------------

@triton.jit
def _prefill_tile(q, q_pos, m_i, l_i, acc, k_ptr, v_ptr, bt_row_ptr, start, key_end, kv_head, qk_scale, window,
                  stride_blk, stride_tok, stride_head, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_N: tl.constexpr, MASKED: tl.constexpr, USE_WINDOW: tl.constexpr,
                  DOT_PRECISION: tl.constexpr):
    """Fold the key tile at ``start`` into the running state. MASKED=False is for tiles that every
    query row of the program sees entirely (no causal, window or length test needed)."""
    tok = start + tl.arange(0, BLOCK_N)
    k, v = _load_kv_tile(k_ptr, v_ptr, bt_row_ptr, tok, kv_head, stride_blk, stride_tok, stride_head,
                         BLOCK_SIZE, HEAD_DIM, tok < key_end, MASKED)
    k, v = k.to(q.dtype), v.to(q.dtype)  # a float8 cache is read back in the query's dtype
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    if MASKED:
        visible = tok[None, :] <= q_pos[:, None]
        if USE_WINDOW:
            visible = visible & (tok[None, :] > q_pos[:, None] - window)
        s = tl.where(visible, s, float("-inf"))
    return _online_softmax_step(s, qk_scale, v, m_i, l_i, acc, DOT_PRECISION)


@triton.jit
def _prefill_kernel(q_ptr, k_ptr, v_ptr, out_ptr, bt_ptr, query_start_ptr, seq_lens_ptr, qk_scale, window,
                    stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, stride_blk, stride_tok, stride_head,
                    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                    USE_WINDOW: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One (query block of BLOCK_Q tokens, KV head, request). Its BLOCK_Q * GROUP_PAD rows are the
    (token, query head) pairs of the group, token-major, so K/V tiles are shared by the group and
    a short query (chunked prefill, a few tokens) still fills the tl.dot rows."""
    # Highest query blocks have the most keys: launch them first to shorten the tail.
    q_block = tl.num_programs(0) - 1 - tl.program_id(0)
    kv_head = tl.program_id(1)
    b = tl.program_id(2)

    q_start = tl.load(query_start_ptr + b)
    q_len = tl.load(query_start_ptr + b + 1) - q_start
    if q_block * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + b)

    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
    r = tl.arange(0, BLOCK_M)
    tok = q_block * BLOCK_Q + r // GROUP_PAD  # index within the request's new tokens
    head_in_group = r % GROUP_PAD
    row_valid = (tok < q_len) & (head_in_group < GROUP)
    q_pos = seq_len - q_len + tok
    heads = kv_head * GROUP + head_in_group
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = (q_start + tok).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                mask=row_valid[:, None], other=0.0)

    # Key range of the program: [lo, key_end) with key_end one past its last query's position.
    first_q = seq_len - q_len + q_block * BLOCK_Q
    last_q = seq_len - q_len + tl.minimum(q_len, (q_block + 1) * BLOCK_Q) - 1
    key_end = last_q + 1
    lo = _first_visible_key(first_q, window, USE_WINDOW) // BLOCK_N * BLOCK_N
    # Tiles in [full_lo, full_hi) are visible to every row: past the window edge of the last query
    # (rounded up) and at or before the first query (rounded down).
    full_lo = tl.cdiv(_first_visible_key(last_q, window, USE_WINDOW), BLOCK_N) * BLOCK_N
    full_hi = (first_q + 1) // BLOCK_N * BLOCK_N
    mid_lo = tl.minimum(tl.maximum(full_lo, lo), key_end)
    mid_hi = tl.maximum(tl.minimum(full_hi, key_end), mid_lo)

    bt_row_ptr = bt_ptr + b.to(tl.int64) * stride_bt
    m_i = tl.full([BLOCK_M], _M_INIT, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start in range(lo, mid_lo, BLOCK_N):  # window's lower edge
        m_i, l_i, acc = _prefill_tile(q, q_pos, m_i, l_i, acc, k_ptr, v_ptr, bt_row_ptr, start, key_end, kv_head,
                                      qk_scale, window, stride_blk, stride_tok, stride_head, BLOCK_SIZE, HEAD_DIM,
                                      BLOCK_N, True, USE_WINDOW, DOT_PRECISION)
    for start in range(mid_lo, mid_hi, BLOCK_N):  # fully visible
        m_i, l_i, acc = _prefill_tile(q, q_pos, m_i, l_i, acc, k_ptr, v_ptr, bt_row_ptr, start, key_end, kv_head,
                                      qk_scale, window, stride_blk, stride_tok, stride_head, BLOCK_SIZE, HEAD_DIM,
                                      BLOCK_N, False, USE_WINDOW, DOT_PRECISION)
    for start in range(mid_hi, key_end, BLOCK_N):  # causal diagonal
        m_i, l_i, acc = _prefill_tile(q, q_pos, m_i, l_i, acc, k_ptr, v_ptr, bt_row_ptr, start, key_end, kv_head,
                                      qk_scale, window, stride_blk, stride_tok, stride_head, BLOCK_SIZE, HEAD_DIM,
                                      BLOCK_N, True, USE_WINDOW, DOT_PRECISION)

    # Every valid row saw at least its own key, so l_i > 0 there; padding rows are not stored.
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + q_rows[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


# --------------------------------------------------------------------------------------------
# Host wrappers
# --------------------------------------------------------------------------------------------

def _check_and_unpack(query: torch.Tensor, kv_cache: torch.Tensor):
    """Cache halves, their strides and the GQA group size; validates what the kernels assume."""
    heads, head_dim = query.shape[1], query.shape[2]
    block_size, kv_heads = kv_cache.shape[2], kv_cache.shape[3]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    if kv_cache.shape[4] != head_dim:
        raise ValueError(f"query head_dim {head_dim} != KV cache head_dim {kv_cache.shape[4]}")
    for name, n in (("head_dim", head_dim), ("block_size", block_size)):
        if n < 1 or n & (n - 1):
            raise ValueError(f"{name} must be a power of two, got {n}")
    if head_dim < 16:
        raise ValueError(f"head_dim must be at least 16 (tl.dot), got {head_dim}")
    if kv_cache.stride(-1) != 1:
        raise ValueError("kv_cache must be contiguous in head_dim")
    key_cache, value_cache = kv_cache[0], kv_cache[1]
    strides = (key_cache.stride(0), key_cache.stride(1), key_cache.stride(2))  # block, token, head
    return key_cache, value_cache, strides, heads // kv_heads


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 inputs are the accuracy path (tests, fp32 models). Plain TF32 would round q.k to
    # ~1e-3; "ieee" runs on CUDA cores and spills badly; tf32x3 (three TF32 products) keeps
    # near-float32 accuracy on the tensor cores.
    return "tf32x3" if dtype == torch.float32 else "tf32"


def _is_wide(head_dim: int, dtype: torch.dtype) -> bool:
    """Rows over 256 bytes (head_dim 256 in 16-bit) and float32 (tf32x3 triples the dot
    operands) get halved tiles: the full ones spill registers or overflow shared memory."""
    return dtype == torch.float32 or head_dim * 2 > 256


def _decode_config(head_dim: int, dtype: torch.dtype, split_size: int) -> tuple[int, int, int]:
    """(keys per tile, num_warps, num_stages) of the split kernel. Measured on H200 (bf16, D 128):
    64-key tiles, 4 warps, 2 stages reach ~3.4 TB/s on large batches; the rest hardly matters."""
    block_n = max(16, DECODE_BLOCK_N // 2) if _is_wide(head_dim, dtype) else DECODE_BLOCK_N
    return min(block_n, split_size), 4, 2


def _prefill_config(head_dim: int, dtype: torch.dtype, group_pad: int) -> tuple[int, int, int, int]:
    """(query tokens per program, keys per tile, num_warps, num_stages). Rows per program are
    tokens x padded group, at least 16 for tl.dot. Measured on H200 (bf16, D 128): 128 rows x 64
    keys, 4 warps, 3 stages beat 64x64 by ~10-20% and 128x128 with 8 warps by ~0-10%."""
    block_m, block_n, stages = PREFILL_BLOCK_M, PREFILL_BLOCK_N, 3
    if _is_wide(head_dim, dtype):
        block_m, block_n, stages = block_m // 2, max(16, block_n // 2), 2 if dtype == torch.float32 else 3
    return max(block_m // group_pad, 1, 16 // group_pad), block_n, 4, stages


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # the interpreter: any value works
    return torch.cuda.get_device_properties(device).multi_processor_count


def _decode_slots(batch: int, kv_heads: int, num_splits: int, device: torch.device) -> int:
    """Split-kernel programs per (request, KV head). From shapes only; results do not depend on
    it (each split is reduced alone), only the spread of the work does."""
    target = DECODE_PROGRAMS_PER_SM * _num_sms(device)
    return max(1, min(num_splits, triton.cdiv(target, batch * kv_heads)))


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def paged_decode_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                           seq_lens: torch.Tensor, scale: float, sliding_window: int | None,
                           batch_invariant: bool = False) -> torch.Tensor:
    # Always batch-invariant: fixed splits, each reduced alone, merged in order (module docstring).
    batch, heads, head_dim = query.shape
    out = torch.empty((batch, heads, head_dim), dtype=query.dtype, device=query.device)
    key_cache, value_cache, (s_blk, s_tok, s_head), group = _check_and_unpack(query, kv_cache)
    kv_heads, block_size = kv_cache.shape[3], kv_cache.shape[2]
    split_size = DECODE_SPLIT_SIZE
    block_n, num_warps, num_stages = _decode_config(head_dim, query.dtype, split_size)
    if split_size % block_n:
        raise ValueError(f"DECODE_SPLIT_SIZE {split_size} is not a multiple of the tile size {block_n}")
    # Shapes only: a CUDA graph captured at one batch size replays with any seq_lens.
    num_splits = triton.cdiv(block_tables.shape[1] * block_size, split_size)
    if batch == 0:
        return out
    if num_splits == 0:
        return out.zero_()
    query = _last_dim_contiguous(query)
    block_tables = _last_dim_contiguous(block_tables)
    seq_lens = seq_lens.contiguous()
    part_out = torch.empty((batch, heads, num_splits, head_dim), dtype=torch.float32, device=query.device)
    part_lse = torch.empty((batch, heads, num_splits), dtype=torch.float32, device=query.device)
    use_window = sliding_window is not None
    window = sliding_window if use_window else 0

    slots = _decode_slots(batch, kv_heads, num_splits, query.device)
    _decode_split_kernel[(batch, kv_heads, slots)](
        query, key_cache, value_cache, block_tables, seq_lens, part_out, part_lse,
        scale * _LOG2E, window, num_splits, query.stride(0), query.stride(1), block_tables.stride(0),
        s_blk, s_tok, s_head,
        GROUP=group, BLOCK_H=max(DECODE_MIN_ROWS, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size, SPLIT_SIZE=split_size, BLOCK_N=block_n, USE_WINDOW=use_window,
        DOT_PRECISION=_dot_precision(query.dtype), num_warps=num_warps, num_stages=num_stages)
    _decode_combine_kernel[(batch, heads)](
        part_out, part_lse, seq_lens, out, window, num_splits, out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, SPLIT_SIZE=split_size, CHUNK=DECODE_COMBINE_CHUNK, USE_WINDOW=use_window, num_warps=4)
    return out


def paged_prefill_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                            query_start_loc: torch.Tensor, seq_lens: torch.Tensor, max_query_len: int,
                            scale: float, sliding_window: int | None) -> torch.Tensor:
    num_tokens, heads, head_dim = query.shape
    out = torch.empty((num_tokens, heads, head_dim), dtype=query.dtype, device=query.device)
    key_cache, value_cache, (s_blk, s_tok, s_head), group = _check_and_unpack(query, kv_cache)
    kv_heads, block_size = kv_cache.shape[3], kv_cache.shape[2]
    batch = seq_lens.shape[0]
    if num_tokens == 0 or batch == 0 or max_query_len <= 0:
        return out
    query = _last_dim_contiguous(query)
    block_tables = _last_dim_contiguous(block_tables)
    group_pad = triton.next_power_of_2(group)
    block_q, block_n, num_warps, num_stages = _prefill_config(head_dim, query.dtype, group_pad)
    use_window = sliding_window is not None

    grid = (triton.cdiv(max_query_len, block_q), kv_heads, batch)
    _prefill_kernel[grid](
        query, key_cache, value_cache, out, block_tables, query_start_loc.contiguous(), seq_lens.contiguous(),
        scale * _LOG2E, sliding_window if use_window else 0,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0), s_blk, s_tok, s_head,
        GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
        BLOCK_N=block_n, USE_WINDOW=use_window, DOT_PRECISION=_dot_precision(query.dtype),
        num_warps=num_warps, num_stages=num_stages)
    return out
