"""Copy checkpoint tensors into a model's parameters, with errors that name the tensor.

Models fuse some checkpoint tensors (q/k/v into qkv_proj, gate/up into gate_up_proj); the
loader maps each checkpoint name to a parameter and a row range, checks the shape, and at the
end reports every parameter the checkpoint did not provide.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import nn

from deepinfer.layers.linear import Linear


def checkpoint_quantization(hf_config: Any) -> str | None:
    """"fp8" for a block-scaled FP8 checkpoint (quantization_config with quant_method fp8), else None."""
    qc = getattr(hf_config, "quantization_config", None)
    if qc is None:
        return None
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    if method == "fp8":
        return "fp8"
    raise ValueError(f"checkpoint quantization {method!r} is not supported (supported: fp8 block-scaled)")


def fp8_block_size(hf_config: Any) -> tuple[int, int] | None:
    if checkpoint_quantization(hf_config) != "fp8":
        return None
    qc = hf_config.quantization_config
    block = qc.get("weight_block_size") if isinstance(qc, dict) else getattr(qc, "weight_block_size", None)
    if not block or len(block) != 2:
        raise ValueError("an FP8 checkpoint needs quantization_config.weight_block_size, e.g. [128, 128]")
    return int(block[0]), int(block[1])


class WeightLoader:
    def __init__(
        self,
        model: nn.Module,
        fused_modules: dict[str, tuple[str, int]],
        prefix_map: dict[str, str],
        ignored: tuple[str, ...] = (),
        fp8_block: tuple[int, int] | None = None,
    ) -> None:
        self.model = model
        self.fused_modules = fused_modules
        self.prefix_map = prefix_map
        self.ignored_suffixes = ignored
        self.ignored_names: set[str] = set()
        self.params = dict(model.named_parameters())
        self.modules = dict(model.named_modules())
        self.fp8_block = fp8_block
        """Block shape of a block-scaled FP8 checkpoint (its weights arrive with ``weight_scale_inv``)."""

    def ignore(self, checkpoint_name: str) -> None:
        self.ignored_names.add(checkpoint_name)

    def _target(self, checkpoint_name: str) -> tuple[str, int | None]:
        name = checkpoint_name
        for old, new in self.prefix_map.items():
            if name.startswith(old):
                name = new + name[len(old):]
                break
        for piece, (fused, shard) in self.fused_modules.items():
            if f".{piece}." in name:
                return name.replace(f".{piece}.", f".{fused}."), shard
        return name, None

    def _expected(self) -> dict[tuple[str, int | None], str]:
        """(parameter, shard) -> a readable name, for every tensor the checkpoint must provide."""
        shard_names: dict[tuple[str, int], str] = {}
        for piece, (fused, shard) in self.fused_modules.items():
            shard_names[(fused, shard)] = piece
        expected = {}
        for pname in self.params:
            module_name, _, _ = pname.rpartition(".")
            module = self.modules[module_name]
            if isinstance(module, Linear) and len(module.output_sizes) > 1:
                fused = module_name.rpartition(".")[2]
                for shard in range(len(module.output_sizes)):
                    piece = shard_names.get((fused, shard), f"shard {shard}")
                    expected[(pname, shard)] = f"{pname} ({piece})"
            else:
                expected[(pname, None)] = pname
        return expected

    def _dequantized_fp8(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterable[tuple[str, torch.Tensor]]:
        """Pair each block-scaled e4m3 weight with its ``weight_scale_inv`` and yield it dequantized."""
        from deepinfer.layers.quantization.fp8 import FP8_DTYPE, dequantize_blocks

        pending_weights: dict[str, torch.Tensor] = {}
        pending_scales: dict[str, torch.Tensor] = {}
        for name, tensor in weights:
            if name.endswith(".weight_scale_inv"):
                base = name[: -len("_scale_inv")]
                pending_scales[base] = tensor
            elif tensor.dtype == FP8_DTYPE:
                base = name
                pending_weights[base] = tensor
            else:
                yield name, tensor
                continue
            if base in pending_weights and base in pending_scales:
                if self.fp8_block is None:
                    raise ValueError(f"checkpoint tensor {base!r} is FP8 but config.json has no fp8 quantization_config")
                yield base, dequantize_blocks(pending_weights.pop(base), pending_scales.pop(base), self.fp8_block)
        unpaired = sorted(set(pending_weights) ^ set(pending_scales))
        if unpaired:
            raise ValueError(f"FP8 checkpoint tensor(s) without their weight/weight_scale_inv partner: {unpaired[:4]}")

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        expected = self._expected()
        loaded: set[tuple[str, int | None]] = set()
        cls = type(self.model).__name__
        for name, tensor in self._dequantized_fp8(weights):
            if name in self.ignored_names or name.endswith(self.ignored_suffixes):
                continue
            target, shard = self._target(name)
            param = self.params.get(target)
            if param is None or (target, shard) not in expected:
                raise ValueError(f"checkpoint tensor {name!r} does not belong to {cls}; is this the right checkpoint?")
            dest = param.data
            if shard is not None:
                dest = dest[self.modules[target.rpartition(".")[0]].shard_slice(shard)]
            if tuple(dest.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)} but {cls} expects "
                    f"{tuple(dest.shape)}; the checkpoint does not match its config.json"
                )
            dest.copy_(tensor)
            loaded.add((target, shard))
        missing = [readable for key, readable in expected.items() if key not in loaded]
        if missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            raise ValueError(f"the checkpoint has no tensor for {cls} parameter(s): {shown}")
