"""Rotary position embedding: neox (half-split) and interleaved layouts, partial rotary, scaling.

The cos/sin table is computed once with the same float32 formula as Hugging Face
(``position * inv_freq``), so looking it up by position gives bit-identical values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from deepinfer import ops

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeSpec:
    """Rotary parameters of a model, read from its Hugging Face config."""

    head_dim: int
    rotary_dim: int
    theta: float
    max_position: int
    rope_type: str = "default"
    scaling: dict[str, Any] = field(default_factory=dict)
    is_neox_style: bool = True

    @classmethod
    def from_hf_config(cls, config: Any, head_dim: int) -> "RopeSpec":
        params = dict(getattr(config, "rope_parameters", None) or {})
        legacy = getattr(config, "rope_scaling", None) or {}
        params = {**legacy, **params}
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope_type {rope_type!r} in the model config is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
        partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
        return cls(
            head_dim=head_dim,
            rotary_dim=int(head_dim * partial),
            theta=float(theta),
            max_position=int(config.max_position_embeddings),
            rope_type=rope_type,
            scaling={k: v for k, v in params.items() if k not in ("rope_theta", "rope_type", "type")},
        )

    def inv_freq(self) -> torch.Tensor:
        exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.int64).float() / self.rotary_dim
        inv_freq = 1.0 / (self.theta**exponents)
        if self.rope_type == "linear":
            inv_freq = inv_freq / self.scaling["factor"]
        elif self.rope_type == "llama3":
            inv_freq = _llama3_scaled(inv_freq, self.scaling)
        return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    """Llama-3.1 frequency scaling: long wavelengths slowed by ``factor``, a smooth ramp between."""
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """Holds the float32 cos/sin table of a model's rotary spec; rotation is deepinfer.ops.rotary_embedding."""

    def __init__(self, spec: RopeSpec) -> None:
        super().__init__()
        self.spec = spec
        positions = torch.arange(spec.max_position, dtype=torch.int64).float()
        freqs = positions[:, None] * spec.inv_freq()[None, :]
        self.register_buffer("cos_sin", torch.cat((freqs.cos(), freqs.sin()), dim=-1), persistent=False)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` [T, heads, head_dim] (any number of heads, e.g. q and k together)."""
        return ops.rotary_embedding(x, positions, self.cos_sin, self.spec.is_neox_style)
