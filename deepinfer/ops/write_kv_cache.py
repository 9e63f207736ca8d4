"""Write new keys and values into the paged KV cache."""

from __future__ import annotations

import torch

from deepinfer.ops.dispatch import get_op


def write_kv_cache_ref(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                       slot_mapping: torch.Tensor) -> None:
    if bool((slot_mapping < 0).any()):
        keep = slot_mapping >= 0
        slot_mapping, key, value = slot_mapping[keep], key[keep], value[keep]
    flat = kv_cache.view(2, -1, *kv_cache.shape[-2:])
    if kv_cache.dtype != key.dtype:  # a float8 cache: cast, then copy bytes (no float8 index_copy on CPU)
        flat = flat.view(torch.uint8)
        limit = torch.finfo(kv_cache.dtype).max  # saturate: torch casts overflow to NaN
        key, value = (t.clamp(-limit, limit).to(kv_cache.dtype).view(torch.uint8) for t in (key, value))
    flat[0].index_copy_(0, slot_mapping, key)
    flat[1].index_copy_(0, slot_mapping, value)


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store ``key``/``value`` [T, kv_heads, head_dim] at ``slot_mapping`` [T] (block * block_size +
    offset) of ``kv_cache`` [2, num_blocks, block_size, kv_heads, head_dim], in place, cast to the
    cache's dtype (float8 e4m3 for an fp8 cache). A negative slot (a padding token of a CUDA-graph
    batch) is skipped."""
    get_op("write_kv_cache", key.device.type)(key, value, kv_cache, slot_mapping)
