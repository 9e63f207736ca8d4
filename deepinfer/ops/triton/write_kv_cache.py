"""Triton KV-cache write: one program per token copies its keys and values into its slot."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv_kernel(k_ptr, v_ptr, cache_ptr, slot_ptr, k_stride, v_stride, kv_offset, width, BLOCK: tl.constexpr):
    tok = tl.program_id(0)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot >= 0:  # negative: a padding token
        cols = tl.arange(0, BLOCK)
        m = cols < width
        tl.store(cache_ptr + slot * width + cols, tl.load(k_ptr + tok * k_stride + cols, mask=m), mask=m)
        tl.store(cache_ptr + kv_offset + slot * width + cols, tl.load(v_ptr + tok * v_stride + cols, mask=m), mask=m)


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    tokens = key.shape[0]
    width = key.shape[1] * key.shape[2]
    k2, v2 = key.reshape(tokens, width), value.reshape(tokens, width)
    if k2.stride(-1) != 1:
        k2 = k2.contiguous()
    if v2.stride(-1) != 1:
        v2 = v2.contiguous()
    if not kv_cache[0].is_contiguous():
        raise ValueError("write_kv_cache needs each half of kv_cache to be contiguous")
    if tokens:
        _write_kv_kernel[(tokens,)](k2, v2, kv_cache, slot_mapping, k2.stride(0), v2.stride(0), kv_cache.stride(0),
                                    width, BLOCK=triton.next_power_of_2(width))
