"""Triton rotary embedding: one program per (token, head), neox or interleaved pairs, partial rotary."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(x_ptr, out_ptr, pos_ptr, cos_sin_ptr, head_dim, rot_half, x_tok_stride, x_head_stride,
                   out_tok_stride, out_head_stride, cs_stride, IS_NEOX: tl.constexpr, BLOCK_HALF: tl.constexpr,
                   BLOCK_DIM: tl.constexpr):
    tok = tl.program_id(0)
    head = tl.program_id(1)
    pos = tl.load(pos_ptr + tok)
    x_row = x_ptr + tok * x_tok_stride + head * x_head_stride
    out_row = out_ptr + tok * out_tok_stride + head * out_head_stride
    i = tl.arange(0, BLOCK_HALF)
    m = i < rot_half
    cos = tl.load(cos_sin_ptr + pos * cs_stride + i, mask=m, other=0.0)
    sin = tl.load(cos_sin_ptr + pos * cs_stride + rot_half + i, mask=m, other=0.0)
    if IS_NEOX:
        first, second = i, i + rot_half
    else:
        first, second = 2 * i, 2 * i + 1
    x1 = tl.load(x_row + first, mask=m, other=0.0)
    x2 = tl.load(x_row + second, mask=m, other=0.0)
    # Same rounding as the reference: cos/sin rounded to x's dtype, products and sums in it.
    cos = cos.to(x1.dtype)
    sin = sin.to(x1.dtype)
    tl.store(out_row + first, x1 * cos + x2 * -sin, mask=m)
    tl.store(out_row + second, x2 * cos + x1 * sin, mask=m)
    # Features beyond the rotary dims pass through unchanged.
    j = tl.arange(0, BLOCK_DIM)
    rest = (j >= 2 * rot_half) & (j < head_dim)
    tl.store(out_row + j, tl.load(x_row + j, mask=rest, other=0.0), mask=rest)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    tokens, heads, head_dim = x.shape
    rot_half = cos_sin.shape[-1] // 2
    out = torch.empty((tokens, heads, head_dim), dtype=x.dtype, device=x.device)
    if tokens:
        _rotary_kernel[(tokens, heads)](
            x, out, positions, cos_sin, head_dim, rot_half, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
            cos_sin.stride(0), IS_NEOX=is_neox, BLOCK_HALF=triton.next_power_of_2(rot_half),
            BLOCK_DIM=triton.next_power_of_2(head_dim),
        )
    return out
