"""The attention backend interface.

A model's ``Attention`` layer knows only its head counts and scale; it hands q/k/v and the
step's ``AttentionMetadata`` to ``metadata.backend``. A backend decides the KV-cache layout,
turns the runner's backend-neutral ``AttentionBatch`` into whatever its kernels need, writes
new keys/values into the paged cache and computes attention. New backends (Triton, FlashAttention,
FlashInfer) plug in here without touching models.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

if TYPE_CHECKING:
    from deepinfer.layers.attention.layer import Attention


@dataclass
class AttentionBatch:
    """One step's batch layout, on the CPU, in the runner's order: decodes (1 query token) first.

    Request ``i`` computes tokens ``query_start_loc[i]:query_start_loc[i+1]`` of the flat batch;
    after this step it has ``seq_lens[i]`` tokens of KV, stored in blocks ``block_tables[i]``.
    """

    query_start_loc: np.ndarray
    seq_lens: np.ndarray
    block_tables: list[list[int]]
    slot_mapping: np.ndarray
    """KV-cache slot (block_id * block_size + offset) of every token in the flat batch."""
    num_decodes: int
    block_size: int

    @property
    def num_requests(self) -> int:
        return len(self.seq_lens)


class AttentionMetadata:
    """Per-step state a backend builds once and every layer reads; the only path to the KV cache."""

    backend: "AttentionBackend"
    kv_caches: list[torch.Tensor]


class AttentionBackend(ABC):
    name: ClassVar[str]
    kv_cache_block_dim: ClassVar[int]
    """The dimension of ``kv_cache_shape`` that indexes blocks."""

    @abstractmethod
    def kv_cache_shape(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple[int, ...]:
        """Shape of one layer's KV cache tensor."""

    @abstractmethod
    def build_metadata(
        self, batch: AttentionBatch, kv_caches: list[torch.Tensor], device: torch.device
    ) -> AttentionMetadata:
        """Move the batch layout to the device in this backend's form."""

    @abstractmethod
    def graph_metadata(self, kv_caches: list[torch.Tensor], slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                       seq_lens: torch.Tensor) -> AttentionMetadata:
        """Metadata of a pure-decode batch whose tensors are a CUDA graph's static input buffers."""

    @abstractmethod
    def forward(
        self, layer: "Attention", q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        """Store k/v [T, Hk, D] in the layer's cache and return attention of q [T, Hq, D] as [T, Hq, D]."""
