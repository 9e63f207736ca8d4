"""Triton rotary embedding: one program per token rotates all of its heads (neox or interleaved
pairs, partial rotary). A program per (token, head) would launch tens of thousands of programs
of 128 elements each for a prefill chunk; per token, each loads its cos/sin row once."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(x_ptr, out_ptr, pos_ptr, cos_sin_ptr, heads, head_dim, rot_half, x_tok_stride, x_head_stride,
                   out_tok_stride, out_head_stride, cs_stride, IS_NEOX: tl.constexpr, BLOCK_HEADS: tl.constexpr,
                   BLOCK_HALF: tl.constexpr, BLOCK_DIM: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok)
    h = tl.arange(0, BLOCK_HEADS)[:, None]
    i = tl.arange(0, BLOCK_HALF)[None, :]
    m = (h < heads) & (i < rot_half)
    x_rows = x_ptr + tok * x_tok_stride + h * x_head_stride
    out_rows = out_ptr + tok * out_tok_stride + h * out_head_stride
    cos = tl.load(cos_sin_ptr + pos * cs_stride + i, mask=i < rot_half, other=0.0)
    sin = tl.load(cos_sin_ptr + pos * cs_stride + rot_half + i, mask=i < rot_half, other=0.0)
    if IS_NEOX:
        first, second = i, i + rot_half
    else:
        first, second = 2 * i, 2 * i + 1
    x1 = tl.load(x_rows + first, mask=m, other=0.0)
    x2 = tl.load(x_rows + second, mask=m, other=0.0)
    # Same rounding as the reference: cos/sin rounded to x's dtype, products and sums in it.
    cos = cos.to(x1.dtype)
    sin = sin.to(x1.dtype)
    tl.store(out_rows + first, x1 * cos + x2 * -sin, mask=m)
    tl.store(out_rows + second, x2 * cos + x1 * sin, mask=m)
    # Features beyond the rotary dims pass through unchanged.
    j = tl.arange(0, BLOCK_DIM)[None, :]
    rest = (h < heads) & (j >= 2 * rot_half) & (j < head_dim)
    tl.store(out_rows + j, tl.load(x_rows + j, mask=rest, other=0.0), mask=rest)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    tokens, heads, head_dim = x.shape
    rot_half = cos_sin.shape[-1] // 2
    out = torch.empty((tokens, heads, head_dim), dtype=x.dtype, device=x.device)
    if tokens:
        block_heads = triton.next_power_of_2(heads)
        _rotary_kernel[(tokens,)](
            x, out, positions, cos_sin, heads, head_dim, rot_half, x.stride(0), x.stride(1), out.stride(0),
            out.stride(1), cos_sin.stride(0), IS_NEOX=is_neox, BLOCK_HEADS=block_heads,
            BLOCK_HALF=triton.next_power_of_2(rot_half), BLOCK_DIM=triton.next_power_of_2(head_dim),
            num_warps=4 if block_heads * head_dim >= 2048 else 1,
        )
    return out
