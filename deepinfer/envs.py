"""The one module that reads ``DEEPINFER_*`` environment variables.

Every variable is declared here with its type, default and meaning; ``deepinfer env``
lists them. Other modules read a value as an attribute, ``envs.DEEPINFER_LOG_LEVEL``,
which parses the variable at the moment of access (so tests can monkeypatch it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected one of 1/0/true/false/yes/no/on/off, got {text!r}")


@dataclass(frozen=True)
class EnvVar:
    """One declared environment variable."""

    name: str
    type: type
    default: Any
    doc: str
    choices: tuple[str, ...] | None = None

    @property
    def parser(self) -> Callable[[str], Any]:
        return _parse_bool if self.type is bool else self.type

    def is_set(self) -> bool:
        return self.name in os.environ

    def value(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        try:
            parsed = self.parser(raw)
        except ValueError as exc:
            raise ValueError(
                f"environment variable {self.name}={raw!r} is not a valid {self.type.__name__}: {exc}"
            ) from None
        if self.choices is not None and parsed not in self.choices:
            raise ValueError(
                f"environment variable {self.name}={raw!r} must be one of {', '.join(self.choices)}"
            )
        return parsed


_DECLARED: tuple[EnvVar, ...] = (
    EnvVar(
        "DEEPINFER_LOG_LEVEL",
        str,
        "INFO",
        "Log level of the deepinfer logger.",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    ),
    EnvVar(
        "DEEPINFER_CPU_THREADS",
        int,
        0,
        "Threads torch uses for CPU execution; 0 leaves torch's default (one per core).",
    ),
    EnvVar(
        "DEEPINFER_ZERO_OVERHEAD_SCHEDULING",
        bool,
        True,
        "Default of SchedulerConfig.async_scheduling when it is not given: schedule and launch step N+1 "
        "before reading step N's tokens (1) or run steps one at a time (0). Unset: on with CUDA, off on CPU.",
    ),
    EnvVar(
        "DEEPINFER_BATCH_INVARIANT",
        bool,
        False,
        "Default of ModelConfig.batch_invariant when it is not given: bitwise the same logits for a request "
        "whatever batch it runs in (1), at a cost in speed.",
    ),
    EnvVar(
        "DEEPINFER_KERNEL_BACKEND",
        str,
        "auto",
        "Kernel backend of deepinfer.ops: auto (Triton on CUDA, torch reference on CPU), torch or triton.",
        choices=("auto", "torch", "triton"),
    ),
    EnvVar(
        "TRITON_INTERPRET",
        bool,
        False,
        "Triton's own switch (read here, never set): 1 runs Triton kernels in its CPU interpreter, for tests.",
    ),
    EnvVar(
        "DEEPINFER_TQDM",
        bool,
        True,
        "Show progress bars for long work (generation, weight loading); set 0 in batch logs.",
    ),
)

ENV_VARS: dict[str, EnvVar] = {var.name: var for var in _DECLARED}


def __getattr__(name: str) -> Any:
    if name in ENV_VARS:
        return ENV_VARS[name].value()
    raise AttributeError(f"module 'deepinfer.envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(ENV_VARS))
