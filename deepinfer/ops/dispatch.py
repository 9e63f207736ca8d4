"""Which implementation of an op runs: the torch reference or the Triton kernel.

Backends are tables ``op name -> function``. The torch backend collects ``<op>_ref`` from each
op module, the Triton backend ``<op>`` from each module under ``ops/triton/``. Importing
``deepinfer.ops`` builds and checks every available backend (``verify_backends``): each must export
exactly ``OP_NAMES``, and a missing, extra or duplicate name fails the import loudly.

Choice (``DEEPINFER_KERNEL_BACKEND``): ``auto`` runs Triton on CUDA tensors and the torch
reference on CPU tensors; ``torch`` always runs the reference; ``triton`` always runs Triton
(on CPU only under ``TRITON_INTERPRET=1``, which is for tests). The choice is cached per
(op, device type); ``clear_cache()`` forgets it after the variable changes.
"""

from __future__ import annotations

import importlib
from typing import Callable

from deepinfer import envs

OP_NAMES: tuple[str, ...] = (
    "write_kv_cache",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "quantize_fp8_per_token",
    "gemv",
    "exponential_race",
    "linear_batch_invariant",
)

# Module of each op, under deepinfer/ops/ (public function and reference) and under
# deepinfer/ops/triton/ (Triton backend); several ops may share a module.
OP_MODULES = {
    "write_kv_cache": "write_kv_cache",
    "paged_decode_attention": "paged_attention",
    "paged_prefill_attention": "paged_attention",
    "rms_norm": "rms_norm",
    "rotary_embedding": "rotary_embedding",
    "silu_and_mul": "silu_and_mul",
    "quantize_fp8_per_token": "quantize_fp8",
    "gemv": "gemv",
    "exponential_race": "exponential_race",
    "linear_batch_invariant": "linear_batch_invariant",
}


def check_backend(name: str, table: dict[str, Callable]) -> dict[str, Callable]:
    missing = sorted(set(OP_NAMES) - set(table))
    extra = sorted(set(table) - set(OP_NAMES))
    if missing or extra:
        raise ImportError(
            f"kernel backend {name!r} does not match deepinfer.ops.OP_NAMES: "
            f"missing {missing or 'none'}, unknown {extra or 'none'}"
        )
    return table


def register(table: dict[str, Callable], name: str) -> Callable[[Callable], Callable]:
    """Decorator that adds a function to a backend table, refusing a second one of the same name."""
    def add(fn: Callable) -> Callable:
        if name in table:
            raise ImportError(f"kernel op {name!r} is registered twice")
        table[name] = fn
        return fn
    return add


def _torch_backend() -> dict[str, Callable]:
    table: dict[str, Callable] = {}
    for op, module in OP_MODULES.items():
        register(table, op)(getattr(importlib.import_module(f"deepinfer.ops.{module}"), f"{op}_ref"))
    return check_backend("torch", table)


def _triton_backend() -> dict[str, Callable] | None:
    if not _triton_backend_available():
        return None
    from deepinfer.ops.triton import build_table

    return check_backend("triton", build_table())


_BACKENDS: dict[str, dict[str, Callable] | None] = {}
_CHOSEN: dict[tuple[str, str], Callable] = {}


def backend_table(name: str) -> dict[str, Callable]:
    if name not in _BACKENDS:
        _BACKENDS[name] = _torch_backend() if name == "torch" else _triton_backend()
    table = _BACKENDS[name]
    if table is None:
        raise RuntimeError(f"kernel backend {name!r} is not available here (is triton installed?)")
    return table


def backend_name(device_type: str) -> str:
    requested = envs.DEEPINFER_KERNEL_BACKEND
    if requested == "auto":
        if device_type == "cuda":
            try:
                backend_table("triton")
                return "triton"
            except RuntimeError:
                return "torch"
        return "torch"
    if requested == "triton" and device_type != "cuda" and not envs.TRITON_INTERPRET:
        raise RuntimeError("DEEPINFER_KERNEL_BACKEND=triton needs CUDA tensors (or TRITON_INTERPRET=1 in tests)")
    return requested


def get_op(name: str, device_type: str) -> Callable:
    key = (name, device_type)
    fn = _CHOSEN.get(key)
    if fn is None:
        fn = _CHOSEN[key] = backend_table(backend_name(device_type))[name]
    return fn


def verify_backends() -> None:
    """Build every backend that can exist here (Triton only where triton imports), checking names."""
    backend_table("torch")
    if _triton_backend_available():
        backend_table("triton")


def _triton_backend_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def clear_cache() -> None:
    _CHOSEN.clear()
