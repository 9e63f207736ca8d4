"""RMSNorm, with the residual add fused in front of it (deepinfer.ops.rms_norm)."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer import ops


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """Without ``residual``: ``norm(x)``. With it: ``(norm(x + residual), x + residual)``."""
        return ops.rms_norm(x, self.weight, self.eps, residual)
