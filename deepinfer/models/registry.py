"""Architecture name (config.json "architectures") -> model class."""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

# Imported lazily so that loading one family never imports the others.
_MODELS: dict[str, str] = {
    "LlamaForCausalLM": "deepinfer.models.llama:LlamaForCausalLM",
    "MistralForCausalLM": "deepinfer.models.llama:LlamaForCausalLM",
    "Qwen2ForCausalLM": "deepinfer.models.llama:LlamaForCausalLM",
    "Qwen3ForCausalLM": "deepinfer.models.llama:LlamaForCausalLM",
}


def supported_architectures() -> list[str]:
    return sorted(_MODELS)


def resolve_model_class(hf_config: Any) -> type[nn.Module]:
    names = getattr(hf_config, "architectures", None) or []
    for name in names:
        if name in _MODELS:
            module, _, cls = _MODELS[name].partition(":")
            return getattr(importlib.import_module(module), cls)
    raise ValueError(
        f"unsupported model architecture {', '.join(names) or '(none given in config.json)'}; "
        f"deepinfer supports: {', '.join(supported_architectures())}"
    )
