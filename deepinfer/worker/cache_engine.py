"""Device KV-cache buffers: one tensor per KV cache in the attention backend's layout."""

from __future__ import annotations

import torch

from deepinfer.layers.attention import AttentionBackend


class CacheEngine:
    def __init__(
        self,
        backend: AttentionBackend,
        num_kv_caches: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = backend.kv_cache_shape(num_blocks, block_size, num_kv_heads, head_dim)
        # One allocation sliced per layer: a single large buffer fragments nothing.
        self._buffer = torch.zeros((num_kv_caches, *shape), dtype=dtype, device=device)
        self.kv_caches = list(self._buffer.unbind(0))

    @staticmethod
    def bytes_per_block(num_kv_caches: int, block_size: int, num_kv_heads: int, head_dim: int,
                        dtype: torch.dtype) -> int:
        element = torch.tensor([], dtype=dtype).element_size()
        return 2 * num_kv_caches * block_size * num_kv_heads * head_dim * element
