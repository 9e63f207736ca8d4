"""Request: the engine-side state of one sequence being generated."""

from __future__ import annotations

import enum
import time

from deepinfer.outputs import RequestMetrics
from deepinfer.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED)


class Request:
    """One sequence: its tokens, how many of them have KV computed, and when it must stop.

    ``n > 1`` prompts become n Requests (one per sample) that share a ``parent_id``.
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        *,
        sampling_seed: int,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        arrival_order: int,
        parent_id: str | None = None,
        sample_index: int = 0,
        arrival_time: float | None = None,
    ) -> None:
        self.request_id = request_id
        self.parent_id = parent_id if parent_id is not None else request_id
        self.sample_index = sample_index
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.all_token_ids: list[int] = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self.sampling_seed = sampling_seed
        self.eos_token_ids = frozenset() if sampling_params.ignore_eos else eos_token_ids
        self.stop_token_ids = frozenset(sampling_params.stop_token_ids)
        self.arrival_order = arrival_order
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        """Tokens whose KV is computed or being computed by a launched step."""
        self.num_inflight_tokens = 0
        """Tokens sampled by launched steps that the host has not seen yet (zero-overhead
        scheduling runs one step ahead, so this is 0 or 1 when a step is scheduled)."""
        self.num_cached_tokens = 0
        self.stop_reason: int | str | None = None
        self.metrics = RequestMetrics(arrival_time=arrival_time if arrival_time is not None else time.time())
        room = max_model_len - len(prompt_token_ids)
        self.max_tokens = room if sampling_params.max_tokens is None else min(sampling_params.max_tokens, room)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_scheduled_tokens(self) -> int:
        """Known tokens plus those in flight: what the next step can build on."""
        return len(self.all_token_ids) + self.num_inflight_tokens

    @property
    def can_schedule_more(self) -> bool:
        """False when an in-flight token is already this request's last (max_tokens or the
        context length): computing past it would be wasted work."""
        return self.num_output_tokens + self.num_inflight_tokens < self.max_tokens

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.finished

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    def check_token_stop(self) -> RequestStatus | None:
        """Stop rules that depend only on token ids (stop strings are checked after detokenizing)."""
        last = self.output_token_ids[-1]
        if self.num_output_tokens >= self.sampling_params.min_tokens:
            if last in self.eos_token_ids:
                return RequestStatus.FINISHED_STOPPED
            if last in self.stop_token_ids:
                self.stop_reason = last
                return RequestStatus.FINISHED_STOPPED
        if self.num_output_tokens >= self.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        return None

    def reset_for_recompute(self) -> None:
        """Preempted: its KV blocks are gone, so all its tokens are prefilled again on resume."""
        self.status = RequestStatus.PREEMPTED
        self.num_computed_tokens = 0
        self.metrics.num_preemptions += 1

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.value}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens})"
        )
