"""Triton backend of deepinfer.ops: one module per op (``ops/triton/<op>.py``)."""

from __future__ import annotations

import importlib
from typing import Callable

from deepinfer.ops.dispatch import OP_MODULES, register


def build_table() -> dict[str, Callable]:
    """Op name -> Triton implementation, importing each op's module (Triton compiles lazily)."""
    table: dict[str, Callable] = {}
    for op, module in OP_MODULES.items():
        register(table, op)(getattr(importlib.import_module(f"deepinfer.ops.triton.{module}"), op))
    return table
