"""Benchmark prompts, as token ids: synthetic (random) or real chat questions (chat).

Prompts are token ids so that both engines get exactly the same input and so that config-only
models (built-in presets, which have no tokenizer) can be benchmarked.
"""

from __future__ import annotations

from typing import Any

import torch

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis to a ten-year-old.",
    "Give me three tips for writing clear code.",
    "What causes the seasons on Earth?",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "How do I make a good cup of tea?",
    "What is the difference between a list and a tuple in Python?",
    "Why is the sky blue?",
    "Suggest a name for a friendly robot.",
    "What are the health benefits of walking every day?",
    "Translate 'good morning' into Spanish, French and German.",
    "Describe a sunset over the mountains.",
    "How does a bicycle stay upright?",
    "What is machine learning, in one paragraph?",
    "Write a short poem about autumn leaves.",
]


def random_prompt_ids(count: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """``count`` prompts of exactly ``input_len`` ids, uniform over ``[0, vocab_size)``.

    A private generator keeps them independent of the global torch seed (and of the engine's),
    so the same arguments give the same prompts in every run and every process.
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (count, input_len), generator=generator)
    return ids.tolist()


def chat_prompt_ids(tokenizer: Any, count: int) -> list[list[int]]:
    """``count`` prompts (cycling through QUESTIONS) as token ids through the chat template."""
    prompts = []
    for i in range(count):
        text = tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                             tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


def load_prompts(dataset: str, count: int, input_len: int, seed: int, model: str | None,
                 tokenizer: str | None = None) -> list[list[int]]:
    """The prompts of a benchmark, read from the model's checkpoint before the engine is built
    (the engine's max_model_len is sized from them)."""
    from deepinfer.default_model import embedded_model_path
    from deepinfer.models.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(model or embedded_model_path(), tokenizer)
    if dataset == "random":
        return random_prompt_ids(count, input_len, int(checkpoint.hf_config().vocab_size), seed)
    if dataset == "chat":
        tok = checkpoint.tokenizer()
        if tok is None and tokenizer is not None:  # a config-only model with a tokenizer given apart
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
        if tok is None:
            raise ValueError(f"--dataset chat needs a tokenizer and model {model!r} has none; "
                             f"use --dataset random or pass --tokenizer")
        return chat_prompt_ids(tok, count)
    raise ValueError(f"unknown dataset {dataset!r}; use random or chat")
