"""Memoize what a CPU reference derives from per-step tensors.

Every layer of a forward pass passes the same tensor objects (positions, sequence lengths)
to an op; what the torch reference derives from them (masks, gathered cos/sin) is the same
for all layers. Computing it once per step instead of once per layer matters on a CPU, where
each small op costs microseconds of overhead. A key matches only the very same tensor objects
at the same version (an in-place write, e.g. into a CUDA-graph input buffer, invalidates it).
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors keep no version; they are made fresh every step
        return 0


class StepMemo:
    def __init__(self) -> None:
        self._key: tuple | None = None
        self._value: Any = None

    @staticmethod
    def _same(a: Any, b: Any) -> bool:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return a is b
        return a == b

    def get(self, key: tuple, compute: Callable[[], Any]) -> Any:
        # Tensor versions go into the key so that in-place updates are seen.
        full_key = key + tuple(_version(t) for t in key if isinstance(t, torch.Tensor))
        old = self._key
        if old is None or len(old) != len(full_key) or not all(self._same(a, b) for a, b in zip(old, full_key)):
            self._value = compute()
            self._key = full_key
        return self._value
