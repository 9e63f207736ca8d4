"""Device KV-cache buffers: one tensor per KV cache in the attention backend's layout."""

from __future__ import annotations

import torch

from deepinfer.layers.attention import AttentionBackend
from deepinfer.transfer import to_device


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
        self.block_dim = backend.kv_cache_block_dim + 1
        # One allocation sliced per layer: a single large buffer fragments nothing. It is not
        # zeroed up front (seconds for GiBs on a CPU); instead every block is zeroed when it is
        # handed to a request, so attention never reads bytes nobody wrote, even in masked slots.
        self._buffer = torch.empty((num_kv_caches, *shape), dtype=dtype, device=device)
        self.kv_caches = list(self._buffer.unbind(0))
        self.zero_blocks([0])

    def zero_blocks(self, block_ids: list[int]) -> None:
        if block_ids:
            index = to_device(block_ids, self._buffer.device, torch.long)
            # Through a byte view: index_fill has no float8 kernels, and all-zero bits are 0.0.
            self._buffer.view(torch.uint8).index_fill_(self.block_dim, index, 0)

    @staticmethod
    def bytes_per_block(num_kv_caches: int, block_size: int, num_kv_heads: int, head_dim: int,
                        dtype: torch.dtype) -> int:
        element = torch.tensor([], dtype=dtype).element_size()
        return 2 * num_kv_caches * block_size * num_kv_heads * head_dim * element
