"""Attention: the layer models call, and the backends that implement it over the paged KV cache."""

from deepinfer.layers.attention.backend import AttentionBackend, AttentionBatch, AttentionMetadata
from deepinfer.layers.attention.layer import Attention
from deepinfer.layers.attention.registry import get_attention_backend

__all__ = ["Attention", "AttentionBackend", "AttentionBatch", "AttentionMetadata", "get_attention_backend"]
