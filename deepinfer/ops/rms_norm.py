"""RMSNorm with an optional residual add fused in front of it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepinfer.ops.dispatch import get_op


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """In float32 this is bit-identical to the Hugging Face formula (normalize in float32, then scale);
    in bf16/fp16 it rounds once where Hugging Face rounds twice (at most one ulp apart, towards the
    exact value)."""
    if residual is None:
        return F.rms_norm(x, weight.shape, weight, eps)
    x = x + residual
    return F.rms_norm(x, weight.shape, weight, eps), x


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """Without ``residual``: ``norm(x)``. With it: ``(norm(x + residual), x + residual)``.
    x [T, hidden] (or [T, heads, head_dim] with weight [head_dim])."""
    return get_op("rms_norm", x.device.type)(x, weight, eps, residual)
