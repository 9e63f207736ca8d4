"""The Hugging Face transformers baseline: ``model.generate`` on the same prompts, same process."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class BaselineResult:
    output_tokens: int
    seconds: float

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def load_hf_model(model_path: str, dtype: torch.dtype, device: str):
    import transformers

    path = Path(model_path)
    if path.suffix == ".gguf":
        model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device).eval()


@torch.inference_mode()
def hf_generate_throughput(model, prompts: list[list[int]], output_len: int, batch_size: int,
                           pad_token_id: int) -> BaselineResult:
    """Greedy ``generate`` in batches of ``batch_size`` (left-padded), exactly ``output_len`` new tokens each."""
    device = next(model.parameters()).device
    batches = [prompts[i : i + batch_size] for i in range(0, len(prompts), batch_size)]

    def run(batch: list[list[int]], new_tokens: int) -> int:
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, p in enumerate(batch):
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad_token_id)
        return (out.shape[1] - width) * len(batch)

    run(batches[0][:2], 4)  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = sum(run(b, output_len) for b in batches)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return BaselineResult(tokens, time.perf_counter() - start)
