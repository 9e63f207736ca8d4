"""Gated activations."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer import ops


class SiluAndMul(nn.Module):
    """``silu(gate) * up`` for an input laid out as [..., gate | up]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.silu_and_mul(x)
