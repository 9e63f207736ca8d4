"""Benchmark prompts: real chat questions, rendered with the model's chat template."""

from __future__ import annotations

from typing import Any

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


def chat_prompt_ids(tokenizer: Any, count: int) -> list[list[int]]:
    """``count`` prompts (cycling through QUESTIONS) as token ids through the chat template."""
    prompts = []
    for i in range(count):
        text = tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                             tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts
