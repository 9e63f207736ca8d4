"""What generation returns to the user (vLLM-shaped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass
class Logprob:
    """Log-probability of one candidate token at one position."""

    logprob: float
    rank: int
    """1 = most likely token at this position."""
    decoded_token: str | None = None


# One dict per generated token: candidate token id -> its Logprob (the top-N plus the chosen one).
SampleLogprobs = list[dict[int, Logprob]]


@dataclass
class CompletionOutput:
    """One sampled completion of a prompt."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None = None
    """"stop" (EOS, stop string or stop token), "length" (max_tokens / context), "abort", or None while running."""
    stop_reason: int | str | None = None
    """The stop string or stop token id that ended generation, None for EOS or length."""
    logprobs: SampleLogprobs | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """Wall-clock timestamps (time.time()) of one request's life."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0

    @property
    def time_to_first_token(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time


@dataclass
class RequestOutput:
    """The state of one prompt's generation: all of its completions so far."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache."""
    error: str | None = field(default=None)
    """Set when the request was rejected or failed; the other requests are unaffected."""
