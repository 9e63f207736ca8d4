"""Engine configuration: documented dataclasses, validated on construction.

``LLM(**kwargs)`` and the CLI take the flat field names of these dataclasses; an unknown
name is an error that lists the known ones. Fields that depend on the checkpoint (the
resolved dtype, the model's context length) are filled in when the engine loads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")
LOAD_FORMATS = ("auto", "dummy")
QUANTIZATIONS = (None, "fp8")
DEVICES = ("auto", "cpu", "cuda")


def _bad(name: str, allowed: str, value: Any) -> ValueError:
    return ValueError(f"{name} must be {allowed}, got {value!r}")


def _positive_int(name: str, value: Any, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(name, "a positive integer" + (" or None" if optional else ""), value)


@dataclass
class ModelConfig:
    """Which checkpoint to run and in what precision."""

    model: str | None = None
    """A Hugging Face model directory, a .gguf file, a config.json or a built-in config name (llama3-8b,
    qwen3-8b, ...; these two need load_format="dummy"). None runs the embedded SmolLM2-135M-Instruct."""
    load_format: str = "auto"
    """auto: read the checkpoint's weights. dummy: random weights at the model's shapes (benchmarks)."""
    tokenizer: str | None = None
    """Tokenizer directory if it is not the model's own."""
    dtype: str = "auto"
    """Weight and activation dtype: auto (the checkpoint's; float32 for GGUF on CPU, bfloat16 for GGUF
    on CUDA), float32, bfloat16 or float16."""
    max_model_len: int | None = None
    """Longest sequence (prompt + output) a request may reach; None takes the model's context length."""
    seed: int = 0
    """Seed of the engine's random state; requests without their own seed draw from it."""
    max_logprobs: int = 20
    """Largest SamplingParams.logprobs a request may ask for."""
    quantization: str | None = None
    """fp8: linear weights in FP8 (e4m3) with a scale per output channel, activations quantized per
    token (a bf16 checkpoint is quantized as it loads). None: the checkpoint's own format (fp8 for
    a block-scaled FP8 checkpoint)."""
    enforce_eager: bool = False
    """Run every step eagerly; by default decode steps on CUDA replay captured CUDA graphs."""
    batch_invariant: bool | None = None
    """A request's logits (and so its tokens) are bitwise the same whatever batch it runs in: every
    matmul reduces in one fixed order per row (fixed tiles, no split-K), and attention runs every
    query token, prefill or decode, through the same fixed-split decode reduction. Costs speed:
    CPU matmuls about 1-2.5x, attention of long prompts much more (each prompt token reads its
    keys on its own). Not with quantization. None: DEEPINFER_BATCH_INVARIANT decides (off unless 1)."""

    def __post_init__(self) -> None:
        if self.model is not None and not isinstance(self.model, str):
            self.model = str(self.model)
        if self.load_format not in LOAD_FORMATS:
            raise _bad("load_format", f"one of {', '.join(LOAD_FORMATS)}", self.load_format)
        if self.dtype not in DTYPES:
            raise _bad("dtype", f"one of {', '.join(DTYPES)}", self.dtype)
        _positive_int("max_model_len", self.max_model_len, optional=True)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise _bad("seed", "an integer", self.seed)
        if self.quantization not in QUANTIZATIONS:
            raise _bad("quantization", "None or fp8", self.quantization)
        if not isinstance(self.enforce_eager, bool):
            raise _bad("enforce_eager", "a bool", self.enforce_eager)
        if self.batch_invariant is not None and not isinstance(self.batch_invariant, bool):
            raise _bad("batch_invariant", "true, false or None", self.batch_invariant)
        if self.batch_invariant and self.quantization is not None:
            raise ValueError(f"batch_invariant does not support quantization={self.quantization!r}; turn one off")

    def resolve_batch_invariant(self) -> bool:
        from deepinfer import envs

        return envs.DEEPINFER_BATCH_INVARIANT if self.batch_invariant is None else self.batch_invariant
        if isinstance(self.max_logprobs, bool) or not isinstance(self.max_logprobs, int) or self.max_logprobs < 0:
            raise _bad("max_logprobs", "an integer >= 0", self.max_logprobs)


KV_CACHE_DTYPES = ("auto", "fp8")


@dataclass
class CacheConfig:
    """Size and behaviour of the paged KV cache."""

    block_size: int = 16
    """Tokens per KV-cache block (the unit of allocation and of prefix caching)."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of earlier requests that share a prompt prefix (full blocks only)."""
    gpu_memory_utilization: float = 0.9
    """CUDA: fraction of the device's total memory the engine may use for weights, activations and
    the KV cache together; the KV cache gets what is left."""
    cpu_kv_cache_gib: float = 4.0
    """CPU: GiB of host memory for the KV cache."""
    num_kv_blocks: int | None = None
    """Exact number of KV blocks; overrides the two memory-based sizes above."""
    kv_cache_dtype: str = "auto"
    """auto: keys and values stored in the model's dtype. fp8: stored as float8 e4m3 (values as
    they are, no scaling; e4m3 keeps about 2 significant digits and magnitudes up to 448), which
    halves the cache's memory and the bytes decode attention reads, for twice the tokens and
    faster long-context decoding, at a small accuracy cost."""

    def __post_init__(self) -> None:
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise _bad("kv_cache_dtype", " or ".join(KV_CACHE_DTYPES), self.kv_cache_dtype)
        if isinstance(self.block_size, bool) or self.block_size not in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            raise _bad("block_size", "a power of two from 1 to 256", self.block_size)
        if not isinstance(self.enable_prefix_caching, bool):
            raise _bad("enable_prefix_caching", "a bool", self.enable_prefix_caching)
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
            raise _bad("gpu_memory_utilization", "in (0, 1]", u)
        g = self.cpu_kv_cache_gib
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not g > 0:
            raise _bad("cpu_kv_cache_gib", "a number of GiB > 0", g)
        _positive_int("num_kv_blocks", self.num_kv_blocks, optional=True)

    def resolve_kv_dtype(self, model_dtype):
        """The torch dtype the KV cache is stored in."""
        import torch

        return torch.float8_e4m3fn if self.kv_cache_dtype == "fp8" else model_dtype


@dataclass
class SchedulerConfig:
    """How many requests and tokens one engine step may process."""

    max_num_seqs: int = 256
    """Most requests running at once (each also holds one state slot)."""
    max_num_batched_tokens: int = 2048
    """Token budget of one step, shared by prefill chunks and decodes; longer prompts are chunked."""
    async_scheduling: bool | None = None
    """Zero-overhead scheduling: schedule and launch step N+1 before reading step N's tokens, so
    the host's scheduling and output processing overlap the device's work. Outputs are the same
    either way; a request that stops on EOS or a stop string costs one discarded step. None:
    DEEPINFER_ZERO_OVERHEAD_SCHEDULING if it is set, else on with CUDA and off on CPU (where the
    host is the device, so there is nothing to overlap and the discarded steps would only cost)."""

    def __post_init__(self) -> None:
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise _bad("async_scheduling", "true, false or None", self.async_scheduling)
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)


@dataclass
class DeviceConfig:
    """Where the model runs."""

    device: str = "auto"
    """auto (CUDA when available, else CPU), cpu, cuda or cuda:N."""

    def __post_init__(self) -> None:
        base = self.device.split(":")[0] if isinstance(self.device, str) else None
        if base not in DEVICES or (self.device.count(":") and not self.device.split(":")[1].isdigit()):
            raise _bad("device", "auto, cpu, cuda or cuda:N", self.device)

    def resolve(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={self.device!r} was asked for but torch sees no CUDA device; use device='cpu'")
        return self.device


@dataclass
class EngineConfig:
    """Everything the engine needs, grouped by concern."""

    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)

    @classmethod
    def field_owners(cls) -> dict[str, str]:
        """Flat field name -> the sub-config that owns it."""
        owners = {}
        for group in dataclasses.fields(cls):
            for f in dataclasses.fields(group.default_factory()):  # type: ignore[misc]
                owners[f.name] = group.name
        return owners

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "EngineConfig":
        """Build from flat keyword arguments, e.g. ``EngineConfig.from_kwargs(model=..., block_size=32)``."""
        owners = cls.field_owners()
        unknown = sorted(set(kwargs) - set(owners))
        if unknown:
            raise TypeError(
                f"unknown engine argument(s) {', '.join(unknown)}; known arguments are: {', '.join(sorted(owners))}"
            )
        groups: dict[str, dict[str, Any]] = {name: {} for name in set(owners.values())}
        for name, value in kwargs.items():
            groups[owners[name]][name] = value
        return cls(
            model=ModelConfig(**groups.get("model", {})),
            cache=CacheConfig(**groups.get("cache", {})),
            scheduler=SchedulerConfig(**groups.get("scheduler", {})),
            device=DeviceConfig(**groups.get("device", {})),
        )
