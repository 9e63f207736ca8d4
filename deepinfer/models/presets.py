"""Built-in model configs by name, for benchmarks with random weights (``load_format="dummy"``).

Shapes are those of the published checkpoints' config.json files.
"""

from __future__ import annotations

from typing import Any

_LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_theta": 500000.0}

PRESETS: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256, hidden_size=4096,
        intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_parameters=_LLAMA3_ROPE,
        tie_word_embeddings=False, bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
    ),
    "llama3.2-1b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256, hidden_size=2048,
        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={**_LLAMA3_ROPE, "factor": 32.0}, tie_word_embeddings=True,
        bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
    ),
    "qwen3-8b": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936, hidden_size=4096,
        intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
        bos_token_id=151643, eos_token_id=151645,
    ),
    "mistral-7b": dict(
        architectures=["MistralForCausalLM"], model_type="mistral", vocab_size=32768, hidden_size=4096,
        intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2,
    ),
    "smollm2-135m": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=49152, hidden_size=576,
        intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    ),
}


def preset_config(name: str) -> Any:
    """The Hugging Face config object of a built-in preset."""
    from transformers import AutoConfig

    kwargs = dict(PRESETS[name])
    return AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
