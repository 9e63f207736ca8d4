"""Triton GEMV: each program owns BLOCK_N output features and streams their weight rows over K in
BLOCK_K-wide tiles, keeping a [BLOCK_N, BLOCK_K] float32 partial sum that is reduced once at the
end (so the inner loop is loads and FMAs only)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n, k, w_stride, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    cols = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + rows[:, None].to(tl.int64) * w_stride
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for k0 in range(0, k, BLOCK_K):
        if EVEN_K:
            w = tl.load(w_rows + (k0 + cols)[None, :], mask=row_ok[:, None], other=0.0)
            x = tl.load(x_ptr + k0 + cols)
        else:
            col_ok = k0 + cols < k
            w = tl.load(w_rows + (k0 + cols)[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0)
            x = tl.load(x_ptr + k0 + cols, mask=col_ok, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    out = tl.sum(acc, 1)
    if HAS_BIAS:
        out += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, out.to(out_ptr.dtype.element_ty), mask=row_ok)


def _config(n: int, k: int) -> tuple[int, int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps, num_stages), the fastest found on H200 in bf16 for each of
    Llama-3-8B's shapes (scripts/probe_gemv.py): wide outputs take 16 rows a program, long rows
    (down_proj) 4 rows with 8 warps, the rest 4-8 rows."""
    if n >= 16384:
        return 16, 256, 4, 3
    if k >= 8192:
        return 4, 512, 8, 3
    return (8, 512, 4, 2) if n > 4096 else (4, 512, 4, 3)


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if x.shape[0] != 1:
        raise ValueError(f"gemv takes one row, got {x.shape[0]}")
    n, k = weight.shape
    if weight.stride(1) != 1:
        raise ValueError("gemv needs a row-major weight")
    x = x.contiguous()
    out = torch.empty((1, n), dtype=x.dtype, device=x.device)
    block_n, block_k, warps, stages = _config(n, k)
    block_k = min(block_k, triton.next_power_of_2(k))
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, weight, bias if bias is not None else weight, out, n, k, weight.stride(0), HAS_BIAS=bias is not None,
        EVEN_K=k % block_k == 0, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
    return out
