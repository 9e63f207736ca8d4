"""Triton KV-cache write: one program per token copies its keys and values into its slot."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _to_cache(x, cache_ptr, FP8_MAX: tl.constexpr):
    """x in the cache's dtype; into float8, saturated at the format's largest value like the
    reference (a plain cast would turn overflow into NaN)."""
    if FP8_MAX > 0:
        x = tl.minimum(tl.maximum(x.to(tl.float32), -FP8_MAX), FP8_MAX)
    return x.to(cache_ptr.dtype.element_ty)


@triton.jit
def _write_kv_kernel(k_ptr, v_ptr, cache_ptr, slot_ptr, k_stride, v_stride, kv_offset, width, BLOCK: tl.constexpr,
                     FP8_MAX: tl.constexpr):
    tok = tl.program_id(0)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot >= 0:  # negative: a padding token
        cols = tl.arange(0, BLOCK)
        m = cols < width
        k = _to_cache(tl.load(k_ptr + tok * k_stride + cols, mask=m), cache_ptr, FP8_MAX)
        v = _to_cache(tl.load(v_ptr + tok * v_stride + cols, mask=m), cache_ptr, FP8_MAX)
        tl.store(cache_ptr + slot * width + cols, k, mask=m)
        tl.store(cache_ptr + kv_offset + slot * width + cols, v, mask=m)


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
        fp8_max = torch.finfo(kv_cache.dtype).max if kv_cache.element_size() == 1 else 0.0
        _write_kv_kernel[(tokens,)](k2, v2, kv_cache, slot_mapping, k2.stride(0), v2.stride(0), kv_cache.stride(0),
                                    width, BLOCK=triton.next_power_of_2(width), FP8_MAX=fp8_max)
