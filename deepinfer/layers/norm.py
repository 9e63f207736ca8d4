"""RMSNorm, with the residual add fused in front of it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """``weight * x / rms(x)`` as one fused op.

    In float32 this is bit-identical to the Hugging Face formula (normalize in float32, then
    scale). In bfloat16/float16 it rounds once where Hugging Face rounds twice (after
    normalizing and after scaling), so it can differ from it by one unit in the last place,
    towards the exact value.
    """

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """Without ``residual``: ``norm(x)``. With it: ``(norm(x + residual), x + residual)``."""
        if residual is None:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x = x + residual
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps), x
