"""SiLU-and-mul: ``silu(gate) * up`` for an input laid out as [..., gate | up]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepinfer.ops.dispatch import get_op


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [..., 2 * d] -> [..., d]."""
    return get_op("silu_and_mul", x.device.type)(x)
