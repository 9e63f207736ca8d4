"""A matmul whose every output row depends only on its own input row: batch-invariant mode's
linear layer. Library GEMMs pick kernels, tile shapes and split-K by the problem's size, so a
row's rounding changes with the batch it happens to be in."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepinfer.ops.dispatch import get_op


ROWS_PER_CALL = 16


def linear_batch_invariant_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # Always the same problem shape: rows in zero-padded chunks of ROWS_PER_CALL, one F.linear
    # each, so the library runs the same kernel with the same blocking whatever M is. Checked on
    # the x86 CPU here (MKL / oneDNN) for 1-300 rows in any order, bf16 and fp32; a single
    # [M, K] call is not invariant there, nor is a batched matmul over rows. Cost on the 2-core
    # CPU: about 1-2.5x F.linear.
    m = x.shape[0]
    if m == 0:
        return x.new_zeros(0, weight.shape[0])
    pad = (-m) % ROWS_PER_CALL
    if pad:
        x = torch.cat((x, x.new_zeros(pad, x.shape[1])))
    out = torch.cat([F.linear(chunk, weight) for chunk in x.split(ROWS_PER_CALL)])[:m]
    return out if bias is None else out + bias


def linear_batch_invariant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] @ weight[N, K].T (+ bias) with row i's result independent of M and of the other rows."""
    return get_op("linear_batch_invariant", x.device.type)(x, weight, bias)
