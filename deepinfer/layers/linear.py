"""Linear layers whose weights may be several checkpoint tensors stacked along the output dim."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """``y = x @ W.T + b`` with ``W`` of shape [sum(output_sizes), input_size].

    ``output_sizes`` lists the checkpoint tensors fused into this layer (q/k/v, or gate/up):
    one matmul instead of several, and each tensor loads into its own row range.
    """

    def __init__(
        self,
        input_size: int,
        output_sizes: int | list[int],
        bias: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.output_sizes = [output_sizes] if isinstance(output_sizes, int) else list(output_sizes)
        self.input_size = input_size
        out = sum(self.output_sizes)
        self.weight = nn.Parameter(torch.empty(out, input_size, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def shard_slice(self, shard: int) -> slice:
        start = sum(self.output_sizes[:shard])
        return slice(start, start + self.output_sizes[shard])
