"""Dynamic per-token FP8 (e4m3) quantization of activations, the input side of an FP8 GEMM."""

from __future__ import annotations

import torch

from deepinfer.ops.dispatch import get_op

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8_DTYPE).max
MIN_SCALE = 1e-12 / FP8_MAX
"""Floor of a row's scale, so an all-zero row quantizes to zeros instead of 0/0."""


def quantize_fp8_per_token_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    scale = (xf.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    return (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


def quantize_fp8_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 [M, K], float32 scale [M, 1]) with x ~= q * scale, each row scaled so its
    largest magnitude maps to the e4m3 maximum (448)."""
    return get_op("quantize_fp8_per_token", x.device.type)(x)
