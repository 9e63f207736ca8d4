"""Linear layers whose weights may be several checkpoint tensors stacked along the output dim.

How the matmul runs is the layer's ``LinearMethod``, chosen once the weights are loaded:
plain ``F.linear`` by default; on CPU in bfloat16, oneDNN with the weight pre-packed into its
blocked layout (about 1.4x faster for decode-sized inputs on AMX machines, bit-identical
results), since re-packing on every call is most of the cost of a small matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from deepinfer import ops


class LinearMethod:
    """Plain dense matmul over the layer's weight; a single 16-bit row on CUDA (batch-1 decode)
    goes through the ``gemv`` kernel, which streams the weight faster than cuBLAS does."""

    name = "dense"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias
        self._gemv = weight.is_cuda and weight.dtype in (torch.bfloat16, torch.float16)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._gemv and x.dim() == 2 and x.shape[0] == 1:
            return ops.gemv(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


class OneDNNPackedLinearMethod(LinearMethod):
    """bfloat16 on CPU: the weight pre-packed once for oneDNN (AMX / AVX-512 bf16 kernels)."""

    name = "onednn_packed"
    _BATCH_HINT = 16  # packing layout hint; any input size works with the same results

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__(torch.ops.mkldnn._reorder_linear_weight(weight, self._BATCH_HINT), bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    @staticmethod
    def applies_to(weight: torch.Tensor) -> bool:
        return (weight.device.type == "cpu" and weight.dtype == torch.bfloat16
                and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class BatchInvariantLinearMethod(LinearMethod):
    """Batch-invariant mode: every output row depends only on its input row (``ops.linear_batch_invariant``)."""

    name = "batch_invariant"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        out = ops.linear_batch_invariant(x.reshape(-1, shape[-1]), self.weight, self.bias)
        return out.view(*shape[:-1], out.shape[-1])


def choose_linear_method(weight: torch.Tensor, bias: torch.Tensor | None,
                         quantization: str | None = None, batch_invariant: bool = False) -> LinearMethod:
    if batch_invariant:
        if quantization is not None:
            raise ValueError(f"batch_invariant does not support quantization={quantization!r}; turn one off")
        return BatchInvariantLinearMethod(weight, bias)
    if quantization == "fp8":
        from deepinfer.layers.quantization.fp8 import FP8RowwiseLinearMethod

        return FP8RowwiseLinearMethod(weight, bias)
    method = OneDNNPackedLinearMethod if OneDNNPackedLinearMethod.applies_to(weight) else LinearMethod
    return method(weight, bias)


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
        self.method: LinearMethod | None = None

    def process_weights_after_loading(self, quantization: str | None = None, batch_invariant: bool = False) -> None:
        self.method = choose_linear_method(self.weight, self.bias, quantization, batch_invariant)
        if self.method.weight is not self.weight:
            # The method keeps its own copy (packed or quantized): free the checkpoint-format one.
            self.weight.data = torch.empty(0, dtype=self.weight.dtype, device=self.weight.device)

    @property
    def weight_bytes(self) -> int:
        """Bytes a forward pass reads for the weight in its run-time form."""
        w = self.method.weight if self.method is not None else self.weight
        extra = getattr(self.method, "weight_scale", None)
        return w.numel() * w.element_size() + (extra.numel() * extra.element_size() if extra is not None else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.method is None:
            return F.linear(x, self.weight, self.bias)
        return self.method(x)

    def shard_slice(self, shard: int) -> slice:
        start = sum(self.output_sizes[:shard])
        return slice(start, start + self.output_sizes[shard])


def process_weights_after_loading(model: nn.Module, quantization: str | None = None,
                                  batch_invariant: bool = False) -> None:
    """Turn every linear layer's loaded checkpoint weights into their run-time form
    (``quantization`` applies to the Linear layers, not to the LM head)."""
    for module in model.modules():
        if isinstance(module, Linear):
            module.process_weights_after_loading(quantization, batch_invariant)
        elif module is not model and hasattr(module, "process_weights_after_loading"):
            module.process_weights_after_loading(batch_invariant=batch_invariant)
