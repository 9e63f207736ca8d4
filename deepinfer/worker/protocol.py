"""The worker boundary: what the scheduler sends a model runner each step and what comes back.

Only these dataclasses cross the engine/worker (and later process) boundary. New requests
travel in full once; running requests travel as deltas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deepinfer.sampling_params import SamplingParams


@dataclass
class NewRequestData:
    """A request the runner has not seen (or has dropped after preemption): everything it needs."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    """Tokens generated before a preemption; they are recomputed like prompt tokens."""
    sampling_params: SamplingParams
    sampling_seed: int
    block_ids: list[int]
    state_slot: int
    num_computed_tokens: int
    """Tokens whose KV is already in the cache (prefix-cache hits)."""


@dataclass
class CachedRequestData:
    """A request the runner already holds: only what changed."""

    request_id: str
    new_block_ids: list[int]
    num_computed_tokens: int


@dataclass
class SchedulerOutput:
    new_requests: list[NewRequestData]
    cached_requests: list[CachedRequestData]
    num_scheduled_tokens: dict[str, int]
    """Tokens to compute this step, per request, in the order the scheduler chose."""
    finished_request_ids: set[str] = field(default_factory=set)
    """Requests that ended (or were preempted) since the last step: the runner drops their state."""

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.num_scheduled_tokens


@dataclass
class TokenLogprobs:
    """Log-probabilities at one generated position, before the output processor decodes them."""

    token_ids: list[int]
    """The top-N candidates (most likely first) followed by the sampled token if it was not among them."""
    logprobs: list[float]
    ranks: list[int]


@dataclass
class ModelRunnerOutput:
    request_ids: list[str]
    sampled_token_ids: list[list[int]]
    """Per request (aligned with request_ids): the tokens sampled this step; empty while a prefill is partial."""
    logprobs: list[TokenLogprobs | None]
