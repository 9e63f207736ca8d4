"""The kernel dispatcher: backends must match OP_NAMES exactly; the choice follows the device and
DEEPINFER_KERNEL_BACKEND."""

from __future__ import annotations

import importlib

import pytest

from deepinfer.ops import dispatch


def test_backends_export_exactly_the_op_names():
    assert set(dispatch.backend_table("torch")) == set(dispatch.OP_NAMES)
    pytest.importorskip("triton")
    assert set(dispatch.backend_table("triton")) == set(dispatch.OP_NAMES)


def test_a_missing_or_unknown_op_fails_loudly():
    table = dict(dispatch.backend_table("torch"))
    del table["rms_norm"]
    table["fused_everything"] = print
    with pytest.raises(ImportError, match=r"missing \['rms_norm'\], unknown \['fused_everything'\]"):
        dispatch.check_backend("broken", table)


def test_a_duplicate_op_fails_loudly():
    table: dict = {}
    dispatch.register(table, "silu_and_mul")(print)
    with pytest.raises(ImportError, match="registered twice"):
        dispatch.register(table, "silu_and_mul")(print)


def test_choice_follows_device_and_environment(monkeypatch):
    dispatch.clear_cache()
    try:
        assert dispatch.backend_name("cpu") == "torch"
        monkeypatch.setenv("DEEPINFER_KERNEL_BACKEND", "torch")
        assert dispatch.backend_name("cuda") == "torch"
        monkeypatch.setenv("DEEPINFER_KERNEL_BACKEND", "triton")
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(RuntimeError, match="needs CUDA tensors"):
            dispatch.backend_name("cpu")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        pytest.importorskip("triton")
        silu = importlib.import_module("deepinfer.ops.triton.silu_and_mul").silu_and_mul
        assert dispatch.get_op("silu_and_mul", "cpu") is silu
    finally:
        dispatch.clear_cache()
