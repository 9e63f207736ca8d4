"""Copy checkpoint tensors into a model's parameters, with errors that name the tensor.

Models fuse some checkpoint tensors (q/k/v into qkv_proj, gate/up into gate_up_proj); the
loader maps each checkpoint name to a parameter and a row range, checks the shape, and at the
end reports every parameter the checkpoint did not provide.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from deepinfer.layers.linear import Linear


class WeightLoader:
    def __init__(
        self,
        model: nn.Module,
        fused_modules: dict[str, tuple[str, int]],
        prefix_map: dict[str, str],
        ignored: tuple[str, ...] = (),
    ) -> None:
        self.model = model
        self.fused_modules = fused_modules
        self.prefix_map = prefix_map
        self.ignored_suffixes = ignored
        self.ignored_names: set[str] = set()
        self.params = dict(model.named_parameters())
        self.modules = dict(model.named_modules())

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

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        expected = self._expected()
        loaded: set[tuple[str, int | None]] = set()
        cls = type(self.model).__name__
        for name, tensor in weights:
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
