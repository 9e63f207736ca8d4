"""Triton SiLU-and-mul: one program per (row, column block); silu in float32."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, d, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_row_stride + d + cols, mask=mask, other=0.0)
    silu = (gate / (1.0 + tl.exp(-gate))).to(up.dtype)
    tl.store(out_ptr + row * out_row_stride + cols, silu * up, mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, 2 * d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(d))
    if x2.shape[0]:
        _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(d, block))](x2, out, d, x2.stride(0), out.stride(0), BLOCK=block)
    return out.view(*x.shape[:-1], d)
