"""Tiny random Hugging Face checkpoints, made at test time (no weights are committed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

ARCHS = ("llama", "mistral", "qwen2", "qwen3")

_COMMON = dict(
    vocab_size=384,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    # A larger init than the default 0.02 gives a peaked next-token distribution, like a trained
    # model's; with near-uniform logits argmax ties would make greedy comparisons meaningless.
    initializer_range=0.3,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=False,
)


def hf_config(arch: str, **overrides: Any):
    import transformers

    kw = dict(_COMMON)
    if arch == "llama":
        cls = transformers.LlamaConfig
        kw["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        kw["rope_theta"] = 500000.0
    elif arch == "mistral":
        cls = transformers.MistralConfig
        kw["sliding_window"] = None
    elif arch == "qwen2":
        cls = transformers.Qwen2Config
        kw["tie_word_embeddings"] = True
    elif arch == "qwen3":
        cls = transformers.Qwen3Config
        kw["head_dim"] = 32
    else:
        raise ValueError(arch)
    kw.update(overrides)
    return cls(**kw)


def train_tokenizer(vocab_size: int = 384):
    """A small byte-level BPE with <s>, </s> and <pad>, and a ChatML-style template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = [
        "The quick brown fox jumps over the lazy dog.",
        "Hello world! Once upon a time there was a little model that generated text.",
        "def main():\n    print('hello')\n",
        "Numbers 0 1 2 3 4 5 6 7 8 9 and symbols ,.;:!? are common.",
    ] * 20
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
    )
    return fast


def save_tiny_checkpoint(path: Path, arch: str, seed: int = 0, dtype: torch.dtype = torch.float32,
                         **overrides: Any) -> Path:
    import transformers

    torch.manual_seed(seed)
    config = hf_config(arch, **overrides)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(path)
    train_tokenizer(config.vocab_size).save_pretrained(path)
    return path
