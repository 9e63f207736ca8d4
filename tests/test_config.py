"""Configuration: every field documented, flat kwargs mapped to groups, envs declared."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

from deepinfer import envs
from deepinfer.bench.args import BenchArgs
from deepinfer.config import CacheConfig, DeviceConfig, EngineConfig, ModelConfig, SchedulerConfig
from deepinfer.docs_of import field_docs
from deepinfer.sampling_params import SamplingParams


@pytest.mark.parametrize("cls", [ModelConfig, CacheConfig, SchedulerConfig, DeviceConfig, SamplingParams, BenchArgs])
def test_every_field_has_a_docstring(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_flat_kwargs_go_to_their_group():
    cfg = EngineConfig.from_kwargs(model="m", block_size=32, max_num_seqs=3, device="cpu")
    assert cfg.model.model == "m" and cfg.cache.block_size == 32
    assert cfg.scheduler.max_num_seqs == 3 and cfg.device.device == "cpu"


def test_no_module_reads_the_environment_directly():
    root = pathlib.Path(__file__).parents[1] / "deepinfer"
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "envs.py" and re.search(r"os\.environ|os\.getenv", p.read_text())]
    assert not offenders, f"read DEEPINFER_* variables through deepinfer/envs.py, not in {offenders}"


def test_env_values_are_parsed_and_checked(monkeypatch):
    monkeypatch.setenv("DEEPINFER_TQDM", "0")
    assert envs.DEEPINFER_TQDM is False
    monkeypatch.setenv("DEEPINFER_LOG_LEVEL", "LOUD")
    with pytest.raises(ValueError, match="DEEPINFER_LOG_LEVEL='LOUD' must be one of"):
        envs.DEEPINFER_LOG_LEVEL
    with pytest.raises(AttributeError):
        envs.DEEPINFER_NOT_DECLARED
