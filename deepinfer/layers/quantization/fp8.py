"""FP8 (e4m3) linear layers.

Run-time format: the weight in float8_e4m3fn with one float32 scale per output channel, and
the activations quantized per token on the fly ("dynamic" activation scaling); the GEMM is
``torch._scaled_mm`` with those row/column scales, which cuBLAS runs at FP8 tensor-core rate
on Hopper and torch also implements on CPU.

Checkpoints: a bf16/fp16/fp32 checkpoint is quantized when loaded (``quantization="fp8"``). A
block-scaled FP8 checkpoint (DeepSeek style: ``weight`` in e4m3 plus ``weight_scale_inv`` with one
scale per 128x128 block) is dequantized block by block as it loads and re-quantized per output
channel, which adds at most the rounding error of one e4m3 re-quantization.
"""

from __future__ import annotations

import torch

from deepinfer import ops
from deepinfer.layers.linear import LinearMethod
from deepinfer.ops.quantize_fp8 import FP8_DTYPE, FP8_MAX
_TINY = 1e-12


def quantize_rowwise(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] -> (e4m3 [N, K], float32 scale [N, 1]) with weight ~= q * scale."""
    w = weight.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=_TINY) / FP8_MAX
    return (w / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


def dequantize_blocks(qweight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """A block-scaled e4m3 weight [N, K] with ``scale_inv`` [ceil(N/bn), ceil(K/bk)] -> float32."""
    n, k = qweight.shape
    bn, bk = block
    scale = scale_inv.float().repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    return qweight.float() * scale


class FP8RowwiseLinearMethod(LinearMethod):
    name = "fp8_rowwise"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        qweight, scale = quantize_rowwise(weight)
        # _scaled_mm wants the second operand column-major: the transpose of a row-major [N, K].
        super().__init__(qweight.t(), bias)
        self.weight_scale = scale.t().contiguous()  # [1, N]
        self.out_features = weight.shape[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xq, x_scale = ops.quantize_fp8_per_token(x.reshape(-1, shape[-1]))
        if x.is_cuda:
            out = torch._scaled_mm(xq, self.weight, scale_a=x_scale, scale_b=self.weight_scale, bias=self.bias,
                                   out_dtype=x.dtype)
        else:
            # Not every torch has a CPU _scaled_mm with per-row scales (2.11 has per-tensor only):
            # the same product of dequantized operands, in float32.
            out = (xq.float() * x_scale) @ (self.weight.float() * self.weight_scale)
            if self.bias is not None:
                out = out + self.bias.float()
            out = out.to(x.dtype)
        return out.view(*shape[:-1], self.out_features)
