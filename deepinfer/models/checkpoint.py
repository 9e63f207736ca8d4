"""A model on disk: a Hugging Face directory or a GGUF file, opened the same way.

``open_checkpoint`` gives the Hugging Face config, a tokenizer and an iterator over
``(checkpoint_name, tensor)``; models never see file formats.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Protocol

import torch


class Checkpoint(Protocol):
    path: Path
    format: str
    """"hf" (a Hugging Face directory) or "gguf" (a single GGUF file)."""

    def hf_config(self) -> Any: ...

    def tokenizer(self) -> Any: ...

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]: ...

    def eos_token_ids(self) -> set[int]: ...


class HFCheckpoint:
    """A Hugging Face model directory: config.json, tokenizer files, safetensors (sharded or not)."""

    format = "hf"

    def __init__(self, path: Path, tokenizer_path: Path | None = None) -> None:
        self.path = path
        self.tokenizer_path = tokenizer_path or path
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model directory {str(path)!r} has no config.json; is it a Hugging Face model directory?")
        self._config: Any = None

    def hf_config(self) -> Any:
        if self._config is None:
            from transformers import AutoConfig

            try:
                self._config = AutoConfig.from_pretrained(self.path, local_files_only=True)
            except (ValueError, KeyError) as exc:
                model_type = json.loads((self.path / "config.json").read_text()).get("model_type")
                raise ValueError(
                    f"cannot read {self.path / 'config.json'} (model_type {model_type!r}): {exc}"
                ) from None
        return self._config

    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(self.tokenizer_path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"no usable tokenizer in {str(self.tokenizer_path)!r} ({exc}); pass tokenizer=<directory with tokenizer files>"
            ) from None

    def weight_files(self) -> list[Path]:
        for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            index = self.path / index_name
            if index.is_file():
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
                missing = [s for s in shards if not (self.path / s).is_file()]
                if missing:
                    raise FileNotFoundError(f"{index} lists shard(s) that are missing: {', '.join(missing)}")
                return [self.path / s for s in shards]
        files = sorted(self.path.glob("*.safetensors")) or sorted(self.path.glob("pytorch_model*.bin"))
        if not files:
            raise FileNotFoundError(f"model directory {str(self.path)!r} has no weights (*.safetensors or pytorch_model.bin)")
        return files

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        from safetensors import safe_open

        for file in self.weight_files():
            if file.suffix == ".safetensors":
                with safe_open(file, framework="pt") as f:
                    for name in f.keys():
                        yield name, f.get_tensor(name)
            else:
                yield from torch.load(file, map_location="cpu", weights_only=True).items()

    def eos_token_ids(self) -> set[int]:
        ids = as_id_set(getattr(self.hf_config(), "eos_token_id", None))
        gen = self.path / "generation_config.json"
        if gen.is_file():
            ids |= as_id_set(json.loads(gen.read_text()).get("eos_token_id"))
        return ids


class ConfigCheckpoint:
    """A model given by its config alone (a built-in preset name or a config.json file): shapes
    without weights or tokenizer, for ``load_format="dummy"`` benchmarks."""

    format = "config"

    def __init__(self, path: Path, config: Any) -> None:
        self.path = path
        self._config = config

    def hf_config(self) -> Any:
        return self._config

    def tokenizer(self) -> None:
        return None

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        raise ValueError(f"model {str(self.path)!r} is a config without weights; pass load_format='dummy'")

    def eos_token_ids(self) -> set[int]:
        return as_id_set(getattr(self._config, "eos_token_id", None))


def _config_from_json(path: Path) -> Any:
    from transformers import AutoConfig

    data = json.loads(path.read_text())
    if "model_type" not in data:
        raise ValueError(f"{path} has no model_type; is it a Hugging Face config.json?")
    return AutoConfig.for_model(data.pop("model_type"), **data)


def as_id_set(value: Any) -> set[int]:
    """Token id(s) from a config field (None, an int or a list) as a set."""
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def open_checkpoint(model: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Checkpoint:
    from deepinfer.models.presets import PRESETS, preset_config

    if str(model) in PRESETS:
        return ConfigCheckpoint(Path(str(model)), preset_config(str(model)))
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model path {str(model)!r} does not exist; pass a Hugging Face model directory, a .gguf file, "
            f"a config.json, or a built-in config name ({', '.join(PRESETS)})"
        )
    if path.is_file():
        if path.suffix == ".json":
            return ConfigCheckpoint(path, _config_from_json(path))
        if path.suffix != ".gguf":
            raise ValueError(f"model file {str(model)!r} is not a .gguf file; pass a .gguf file or a model directory")
        from deepinfer.models.gguf_checkpoint import GGUFCheckpoint  # gguf stays off the import path of HF models

        return GGUFCheckpoint(path)
    return HFCheckpoint(path, Path(tokenizer).expanduser() if tokenizer else None)
