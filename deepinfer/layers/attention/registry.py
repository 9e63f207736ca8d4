"""Attention backends by name."""

from __future__ import annotations

from deepinfer.layers.attention.backend import AttentionBackend
from deepinfer.layers.attention.paged_backend import PagedAttentionBackend

_BACKENDS: dict[str, type[AttentionBackend]] = {PagedAttentionBackend.name: PagedAttentionBackend}


def get_attention_backend(name: str = "paged") -> AttentionBackend:
    try:
        return _BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(sorted(_BACKENDS))}") from None
