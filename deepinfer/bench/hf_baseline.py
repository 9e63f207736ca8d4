"""The Hugging Face transformers baseline: ``model.generate`` on the same token ids, same process.

Same model (the checkpoint, or for a config-only model the same config with transformers' own
random init), same dtype and device, greedy, exactly ``output_len`` new tokens per prompt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from deepinfer.bench.session import ModelFacts


RANDOM_INIT_NOTE = ("transformers ran the same config with its own random init, not deepinfer's dummy weights "
                    "(both random: the values differ, the work and so the timing do not)")


@dataclass
class HFModelInfo:
    source: str
    """"checkpoint" (the same weights as deepinfer) or "from_config" (random weights)."""
    attn_implementation: str | None
    note: str


def load_hf_model(facts: ModelFacts) -> tuple[Any, HFModelInfo]:
    """The transformers model for the model deepinfer ran, on the same device and in the same dtype."""
    import transformers

    auto = transformers.AutoModelForCausalLM
    if facts.load_format == "dummy":
        # Built on the device directly: initializing 8B parameters on the CPU takes minutes.
        with torch.device(facts.device):
            model = auto.from_config(facts.hf_config, dtype=facts.dtype)
        source, note = "from_config", RANDOM_INIT_NOTE
    else:
        path = Path(facts.model_path)
        kwargs: dict[str, Any] = {"dtype": facts.dtype}
        if path.suffix == ".gguf":
            path, kwargs["gguf_file"] = path.parent, path.name
        model = auto.from_pretrained(path, **kwargs)
        source, note = "checkpoint", "the same checkpoint deepinfer loaded"
    model = model.to(facts.device).eval()
    return model, HFModelInfo(source=source, attn_implementation=getattr(model.config, "_attn_implementation", None),
                              note=note)


class _FirstTokenClock:
    """A generate() streamer that only notes when the first new token reached the host.

    generate() hands it the prompt first, then every new token (``.cpu()``, so after the device
    produced it); the second call is the first token. Its per-step cost is a host copy that
    generate()'s own per-step stop check already synchronizes for."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token_time: float | None = None

    def put(self, value: Any) -> None:
        self.calls += 1
        if self.calls == 2:
            self.first_token_time = time.perf_counter()

    def end(self) -> None:
        pass


@dataclass
class GenerateTiming:
    """One ``generate`` call on one batch."""

    batch_size: int
    prompt_tokens: int
    output_tokens: int
    seconds: float
    ttft_s: float


def _left_padded(batch: list[list[int]], pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in batch)
    ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, p in enumerate(batch):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def hf_generate(model: Any, batch: list[list[int]], output_len: int, pad_token_id: int) -> GenerateTiming:
    """Greedy ``generate`` of exactly ``output_len`` tokens for every prompt of ``batch`` (left-padded)."""
    device = next(model.parameters()).device
    ids, mask = _left_padded(batch, pad_token_id, device)
    clock = _FirstTokenClock()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=output_len,
                         min_new_tokens=output_len, pad_token_id=pad_token_id, streamer=clock)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    new_tokens = (out.shape[1] - ids.shape[1]) * len(batch)
    if new_tokens != output_len * len(batch):
        raise RuntimeError(f"transformers generated {new_tokens} tokens, expected {output_len * len(batch)}")
    first = clock.first_token_time if clock.first_token_time is not None else start + seconds
    return GenerateTiming(batch_size=len(batch), prompt_tokens=sum(len(p) for p in batch),
                          output_tokens=new_tokens, seconds=seconds, ttft_s=first - start)


def hf_warmup(model: Any, prompts: list[list[int]], pad_token_id: int) -> None:
    """A short untimed generate: CUDA context, kernels and allocator are ready before timing."""
    hf_generate(model, prompts[:2], 4, pad_token_id)

