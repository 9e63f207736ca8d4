"""The options of ``deepinfer bench latency | throughput`` (engine settings are EngineConfig flags).

One documented dataclass serves both commands, so a knob they share (the dataset, the baseline,
the report) is documented once; each command skips the fields that mean nothing to it and
overrides a few defaults (COMMAND_DEFAULTS), chosen for the published runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DATASETS = ("random", "chat")
BENCHMARKS = ("latency", "throughput")


@dataclass
class BenchArgs:
    """What to run, what to compare against, and where to write the result."""

    dataset: str = "random"
    """random: synthetic prompts of exactly input_len token ids drawn uniformly from the vocabulary
    with a fixed seed (no tokenizer needed). chat: real questions through the model's chat template
    (needs a tokenizer; input_len is then ignored)."""
    input_len: int = 128
    """Prompt length in tokens (random dataset)."""
    output_len: int = 256
    """Tokens every request generates (greedy, EOS ignored, so every request does the same work)."""
    dataset_seed: int = 0
    """Seed of the random dataset."""
    num_prompts: int = 1000
    """Throughput: number of prompts, all submitted at once."""
    batch_size: int = 1
    """Latency: requests generated together in each iteration."""
    num_iters: int = 10
    """Latency: timed iterations."""
    num_iters_warmup: int = 3
    """Latency: untimed iterations first (kernel compilation, allocator, CUDA graphs)."""
    compare_hf: bool = False
    """Also time transformers ``generate`` on the same prompts and model, in this process (after
    deepinfer has released the device memory)."""
    hf_batch_size: int | None = None
    """Batch size of the transformers baseline (left-padded batches); None: the latency batch size,
    or 128 for throughput."""
    hf_num_prompts: int | None = None
    """Throughput: time transformers on only the first N prompts (its batches are independent, so
    its tok/s holds for all of them); None: all prompts."""
    roofline: bool = False
    """Measure the device's copy bandwidth and matmul rate, and report deepinfer's result as a
    percentage of the bound they give."""
    profile_steps: int = 0
    """Run this many engine steps of the timed run under torch.profiler and report the time per
    kernel and the share of the window the device sat idle (0: no profile). The profiler slows
    the host, so the run's own figures are then not the ones to publish."""
    profile_skip_steps: int = 0
    """Engine steps of the timed run before the profiled window (to profile, say, pure decode
    steps once the prompts are in)."""
    output: str | None = None
    """Write the JSON result here, and a PNG plot next to it (same name, .png)."""

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {self.dataset!r}")
        for name in ("input_len", "output_len", "num_prompts", "batch_size", "num_iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("num_iters_warmup", "profile_steps", "profile_skip_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("hf_batch_size", "hf_num_prompts"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")

    @classmethod
    def for_command(cls, benchmark: str, **kwargs: Any) -> "BenchArgs":
        """The arguments of one command: its defaults, then ``kwargs``."""
        return cls(**{**COMMAND_DEFAULTS[benchmark], **kwargs})


COMMAND_DEFAULTS: dict[str, dict[str, Any]] = {
    # Batch-1 latency of a short chat-like turn: 128 tokens in, 256 out.
    "latency": {},
    # Offline throughput at long sequences: 1000 prompts of 1000 tokens, 1000 out each.
    "throughput": {"input_len": 1000, "output_len": 1000},
}

COMMAND_SKIPS: dict[str, tuple[str, ...]] = {
    "latency": ("num_prompts", "hf_num_prompts"),
    "throughput": ("batch_size", "num_iters", "num_iters_warmup"),
}
"""Fields that are not flags of a command (they mean nothing to it)."""
