"""Triton RMSNorm with the residual add fused: one program per row, statistics in float32."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n, eps, x_stride, res_stride, out_stride,
                     res_out_stride, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # The sum is rounded to the model dtype before normalizing, as the unfused add would be.
        x = x + tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0)
        tl.store(res_out_ptr + row * res_out_stride + cols, x, mask=mask)
    xf = x.to(tl.float32)
    variance = tl.sum(xf * xf, axis=0) / n
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xf * tl.math.rsqrt(variance + eps) * w
    tl.store(out_ptr + row * out_stride + cols, y.to(x.dtype), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    out = torch.empty_like(x2)
    block = triton.next_power_of_2(n)
    rows = x2.shape[0]
    if residual is None:
        if rows:
            _rms_norm_kernel[(rows,)](x2, x2, weight, out, out, n, eps, x2.stride(0), 0, out.stride(0), 0,
                                      HAS_RESIDUAL=False, BLOCK=block)
        return out.view(x.shape)
    r2 = residual.reshape(-1, n)
    res_out = torch.empty_like(x2)
    if rows:
        _rms_norm_kernel[(rows,)](x2, r2, weight, out, res_out, n, eps, x2.stride(0), r2.stride(0), out.stride(0),
                                  res_out.stride(0), HAS_RESIDUAL=True, BLOCK=block)
    return out.view(x.shape), res_out.view(x.shape)
