"""Triton batch-invariant matmul: one fixed tile configuration for every problem size and no
split-K, so each output element is the same sequence of BLOCK_K-wide tile products, accumulated
in float32 in the same order, whichever rows share its tile."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64


@triton.jit
def _matmul_kernel(x_ptr, w_ptr, b_ptr, out_ptr, m, n, k, stride_xm, stride_wn, stride_om, HAS_BIAS: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, k, BLOCK_K):
        kk = k0 + ks
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + kk[None, :],
                    mask=(rows[:, None] < m) & (kk[None, :] < k), other=0.0)
        w = tl.load(w_ptr + cols[None, :].to(tl.int64) * stride_wn + kk[:, None],
                    mask=(cols[None, :] < n) & (kk[:, None] < k), other=0.0)
        acc = tl.dot(x, w, acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def linear_batch_invariant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    m, k = x.shape
    n = weight.shape[0]
    if x.stride(-1) != 1:
        x = x.contiguous()
    if weight.stride(-1) != 1:
        raise ValueError("linear_batch_invariant needs a row-major weight")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m:
        grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
        _matmul_kernel[grid](x, weight, bias if bias is not None else weight, out, m, n, k, x.stride(0),
                             weight.stride(0), out.stride(0), HAS_BIAS=bias is not None, BLOCK_M=BLOCK_M,
                             BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                             DOT_PRECISION="tf32x3" if x.dtype == torch.float32 else "tf32", num_warps=4,
                             num_stages=3)
    return out
