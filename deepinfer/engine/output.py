"""Output processing: incremental detokenization, stop strings, logprobs, and RequestOutputs.

Detokenizing token by token cannot decode each token alone: byte-level BPE splits one
character over several tokens, and sentencepiece drops a word's leading space when a token
is decoded without the token before it. So each step decodes a short window that starts a
few tokens back (``prefix_offset``) and emits only the text beyond what the window had already
produced (``read_offset``); text ending in an incomplete character (U+FFFD) waits for the
next token.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from deepinfer.engine.request import Request, RequestStatus
from deepinfer.outputs import CompletionOutput, Logprob, RequestOutput
from deepinfer.worker.protocol import TokenLogprobs

_CONTEXT_TOKENS = 5
"""Prompt tokens decoded along with the first output token, for correct spacing."""


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], skip_special_tokens: bool) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.tokens = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.tokens)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens,
                                     clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        """Append one token; return the text it completes (possibly empty)."""
        self.tokens.append(token_id)
        before = self._decode(self.tokens[self.prefix_offset : self.read_offset])
        after = self._decode(self.tokens[self.prefix_offset :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """At the end of generation: the held-back text, even if it ends in an incomplete character."""
        before = self._decode(self.tokens[self.prefix_offset : self.read_offset])
        after = self._decode(self.tokens[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.tokens)
        return after[len(before) :]


@dataclass
class SampleState:
    """Text-side state of one sample (one Request)."""

    index: int
    detokenizer: IncrementalDetokenizer | None
    """None when the model has no tokenizer: the output is token ids only."""
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def as_output(self) -> CompletionOutput:
        return CompletionOutput(self.index, self.text, list(self.token_ids), self.finish_reason, self.stop_reason,
                                list(self.logprobs) if self.logprobs is not None else None)


@dataclass(eq=False)  # compared and hashed by identity
class ParentState:
    """One user request (a prompt with n samples)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    samples: list[SampleState]
    requests: list[Request]
    stream: bool = False

    @property
    def finished(self) -> bool:
        return all(s.finish_reason is not None for s in self.samples)


class OutputProcessor:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.parents: dict[str, ParentState] = {}
        self._sample_of: dict[str, tuple[ParentState, SampleState]] = {}

    def add(self, request_id: str, prompt: str | None, requests: list[Request], stream: bool = False) -> None:
        samples = []
        parent = ParentState(request_id, prompt, requests[0].prompt_token_ids, samples, requests, stream)
        for req in requests:
            p = req.sampling_params
            detokenizer = None if self.tokenizer is None else IncrementalDetokenizer(
                self.tokenizer, req.prompt_token_ids, p.skip_special_tokens)
            sample = SampleState(req.sample_index, detokenizer, logprobs=[] if p.logprobs is not None else None)
            samples.append(sample)
            self._sample_of[req.request_id] = (parent, sample)
        self.parents[request_id] = parent

    def process(self, updated: list[Request], new_counts: dict[str, int],
                logprobs: dict[str, TokenLogprobs | None]) -> list[str]:
        """Detokenize new tokens; return ids of requests that a stop string just ended."""
        stopped_by_string = []
        for req in updated:
            parent, sample = self._sample_of[req.request_id]
            new_tokens = req.output_token_ids[-new_counts[req.request_id] :]
            sample.token_ids.extend(new_tokens)
            lp = logprobs.get(req.request_id)
            if sample.logprobs is not None and lp is not None:
                sample.logprobs.append(self._decode_logprobs(lp))
            ended_by_token = req.is_finished and req.status == RequestStatus.FINISHED_STOPPED
            stopped = False
            for i, token in enumerate(new_tokens if sample.detokenizer is not None else ()):
                if ended_by_token and i == len(new_tokens) - 1:
                    break  # the EOS / stop token that ended the request is not part of the text
                if self._append_text(req, sample, sample.detokenizer.add(token)):
                    stopped_by_string.append(req.request_id)
                    stopped = True
                    break
            if req.is_finished and not stopped and sample.detokenizer is not None:
                stopped = self._append_text(req, sample, sample.detokenizer.flush())
                if stopped:
                    stopped_by_string.append(req.request_id)
            if req.is_finished and sample.finish_reason is None:
                sample.finish_reason = req.status.value
                sample.stop_reason = req.stop_reason
        return stopped_by_string

    def _append_text(self, req: Request, sample: SampleState, delta: str) -> bool:
        """Add new text; on a stop string, cut the text before it and return True."""
        if not delta:
            return False
        stops = req.sampling_params.stop
        start = max(len(sample.text) - max((len(s) for s in stops), default=0) + 1, 0)
        sample.text += delta
        for stop in stops:
            at = sample.text.find(stop, start)
            if at != -1:
                sample.text = sample.text[:at]
                sample.finish_reason, sample.stop_reason = "stop", stop
                return True
        return False

    def _decode_logprobs(self, lp: TokenLogprobs) -> dict[int, Logprob]:
        return {
            tid: Logprob(value, rank, None if self.tokenizer is None else self.tokenizer.decode([tid]))
            for tid, value, rank in zip(lp.token_ids, lp.logprobs, lp.ranks)
        }

    def mark_aborted(self, request: Request) -> None:
        entry = self._sample_of.get(request.request_id)
        if entry is not None and entry[1].finish_reason is None:
            entry[1].finish_reason = "abort"

    def make_output(self, parent_id: str) -> RequestOutput:
        parent = self.parents[parent_id]
        first = parent.requests[0]
        metrics = first.metrics
        if len(parent.requests) > 1:  # the prompt's timeline spans all its samples
            times = [r.metrics for r in parent.requests]
            metrics = replace(
                metrics,
                first_token_time=min((t.first_token_time for t in times if t.first_token_time), default=None),
                finished_time=max(t.finished_time for t in times) if parent.finished else None,
                num_preemptions=sum(t.num_preemptions for t in times),
            )
        return RequestOutput(
            request_id=parent.request_id,
            prompt=parent.prompt,
            prompt_token_ids=parent.prompt_token_ids,
            outputs=[s.as_output() for s in parent.samples],
            finished=parent.finished,
            metrics=metrics,
            num_cached_tokens=first.num_cached_tokens,
        )

    def parent_of(self, request_id: str) -> ParentState:
        return self._sample_of[request_id][0]

    def release(self, parent_id: str) -> None:
        parent = self.parents.pop(parent_id)
        for req in parent.requests:
            self._sample_of.pop(req.request_id, None)
