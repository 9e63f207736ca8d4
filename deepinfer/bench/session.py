"""The engine's life in a benchmark: build it for the prompts, note what outlives it, free the device.

deepinfer's KV cache takes most of the GPU, so the transformers baseline (and the roofline's
buffers) can only run once the engine is gone; ModelFacts keeps what they need from it.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
from dataclasses import dataclass
from typing import Any

import torch

from deepinfer.bench.model_stats import ModelStats, engine_model_stats
from deepinfer.engine.llm_engine import StepTimings


def engine_kwargs_for(engine_kwargs: dict[str, Any], prompts: list[list[int]], output_len: int) -> dict[str, Any]:
    """The engine arguments with max_model_len, when not given, just long enough for the prompts:
    a model's full context (131072 for Llama 3) would only cost KV-cache sizing and startup."""
    needed = max(len(p) for p in prompts) + output_len
    given = engine_kwargs.get("max_model_len")
    if given is None:
        return {**engine_kwargs, "max_model_len": needed}
    if given < needed:
        raise ValueError(f"max_model_len={given} is shorter than the longest prompt plus output_len ({needed}); "
                         f"raise it or leave it unset")
    return dict(engine_kwargs)


def open_engine(engine_kwargs: dict[str, Any]):
    from deepinfer.entrypoints.llm import LLM

    return LLM(**engine_kwargs)


def snapshot_timings(llm) -> StepTimings:
    """A copy of the engine's running totals (the engine updates its own object in place)."""
    return dataclasses.replace(llm.engine.step_timings)


@dataclass
class ModelFacts:
    """What the rest of a benchmark needs from the engine after it is freed."""

    model_path: str
    load_format: str
    hf_config: Any
    dtype: torch.dtype
    device: torch.device
    max_model_len: int
    num_kv_blocks: int
    block_size: int
    vocab_size: int
    pad_token_id: int
    stats: ModelStats
    engine_config: dict[str, Any]
    """``dataclasses.asdict(llm.config)``: the settings as given (``auto`` not yet resolved)."""

    @classmethod
    def of(cls, llm) -> "ModelFacts":
        engine = llm.engine
        tok = engine.tokenizer
        pad = getattr(tok, "pad_token_id", None)
        if pad is None:  # no tokenizer, or no pad token: any id will do, padded positions are masked
            pad = min(engine.eos_token_ids, default=0)
        return cls(
            model_path=engine.model_path,
            load_format=llm.config.model.load_format,
            hf_config=copy.deepcopy(engine.worker.spec.hf_config),
            dtype=engine.dtype,
            device=engine.device,
            max_model_len=engine.max_model_len,
            num_kv_blocks=engine.worker.num_blocks,
            block_size=llm.config.cache.block_size,
            vocab_size=engine.vocab_size,
            pad_token_id=int(pad),
            stats=engine_model_stats(llm),
            engine_config=dataclasses.asdict(llm.config),
        )

    def resolved(self) -> dict[str, Any]:
        """The settings the engine resolved (for the JSON): what ``auto`` and None became."""
        return {
            "model_path": self.model_path,
            "dtype": str(self.dtype).replace("torch.", ""),
            "device": str(self.device),
            "max_model_len": self.max_model_len,
            "num_kv_blocks": self.num_kv_blocks,
            "kv_cache_tokens": self.num_kv_blocks * self.block_size,
            "model_stats": dataclasses.asdict(self.stats),
        }


def free_device_memory(device: torch.device) -> float | None:
    """Collect what the dropped engine left (its graphs and caches hold reference cycles) and hand
    the cached blocks back to the driver. Returns the GiB torch still has allocated on CUDA."""
    gc.collect()
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(device) / (1 << 30)
