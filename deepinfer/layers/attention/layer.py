"""The attention layer models instantiate; the math lives in the backend."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.layers.attention.backend import AttentionMetadata


class Attention(nn.Module):
    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float,
        kv_cache_index: int,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_attention_heads ({num_heads}) must be a multiple of num_key_value_heads ({num_kv_heads})")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.kv_cache_index = kv_cache_index
        """Which KV cache this layer reads and writes (layers that share KV share an index)."""
        self.sliding_window = sliding_window
        """Attend only to the last ``sliding_window`` positions (including the query's own), or all."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        return metadata.backend.forward(self, q, k, v, metadata)
