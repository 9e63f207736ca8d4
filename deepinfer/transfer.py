"""Host <-> device copies that never stall the host on the device's queue.

A plain ``tensor.to("cuda")`` from pageable memory waits for the whole stream to drain before it
returns, so every such copy in the step path would undo CPU/GPU overlap. Going through pinned
memory with ``non_blocking=True`` only enqueues the copy; torch's pinned-memory cache keeps the
staging buffer alive (and unreused) until the copy has run.
"""

from __future__ import annotations

import numpy as np
import torch


def to_device(array: np.ndarray | list, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``array`` as a tensor on ``device``; on CUDA the copy is queued, not waited for."""
    host = torch.from_numpy(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else torch.tensor(array)
    if dtype is not None and host.dtype != dtype:
        host = host.to(dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def copy_into(dst: torch.Tensor, array: np.ndarray) -> None:
    """Copy host ``array`` into the device tensor ``dst`` (same number of elements), queued."""
    host = torch.from_numpy(np.ascontiguousarray(array)).to(dst.dtype).view(dst.shape)
    if dst.device.type == "cuda":
        dst.copy_(host.pin_memory(), non_blocking=True)
    else:
        dst.copy_(host)


class HostCopy:
    """Device tensors on their way to the host: the copies are queued now, ``wait()`` returns them
    once the device has produced them (the only point where the host waits for the device)."""

    def __init__(self, tensors: dict[str, torch.Tensor | None]) -> None:
        self._event = None
        self._host: dict[str, torch.Tensor | None] = {}
        for name, t in tensors.items():
            if t is None or t.device.type != "cuda":
                self._host[name] = t
                continue
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            buf.copy_(t, non_blocking=True)
            self._host[name] = buf
            if self._event is None:
                self._event = torch.cuda.Event()
        if self._event is not None:
            self._event.record()

    def wait(self) -> dict[str, torch.Tensor | None]:
        if self._event is not None:
            self._event.synchronize()
        return self._host
