"""Shared fixtures: tiny random checkpoints (made once per session) and their HF reference models."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DEEPINFER_TQDM", "0")

import torch  # noqa: E402

if not torch.cuda.is_available():
    # Triton kernels are tested in Triton's CPU interpreter. The switch must be on before
    # triton is first imported (transformers may import it), since triton.language's own
    # helpers are jitted at import.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from tests.tiny_models import ARCHS, save_tiny_checkpoint


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, str]:
    """Architecture name -> directory of a tiny random fp32 checkpoint with a tokenizer."""
    root = tmp_path_factory.mktemp("tiny")
    return {arch: str(save_tiny_checkpoint(root / arch, arch)) for arch in ARCHS}


@pytest.fixture(scope="session")
def tiny_llama(tiny_checkpoints) -> str:
    return tiny_checkpoints["llama"]
