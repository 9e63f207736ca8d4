"""Attention backends by name."""

from __future__ import annotations

from deepinfer.layers.attention.backend import AttentionBackend
from deepinfer.layers.attention.torch_backend import TorchAttentionBackend

_BACKENDS: dict[str, type[AttentionBackend]] = {TorchAttentionBackend.name: TorchAttentionBackend}


def get_attention_backend(name: str = "torch") -> AttentionBackend:
    try:
        return _BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(sorted(_BACKENDS))}") from None
