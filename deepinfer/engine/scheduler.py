"""Scheduler: token-budget continuous batching with chunked prefill and preemption by recompute.

NOTE on the algorithm: there is no prefill phase and no decode phase. Each request has
``num_computed_tokens`` and ``num_tokens``; each step grants some requests new tokens to
compute, under one token budget (``max_num_batched_tokens``). A decode is a grant of 1 token,
a prefill chunk a grant of many, and both share a step.

Policy (first come, first served, and nobody starves):
- Running requests are served oldest first; waiting requests are admitted strictly in arrival
  order, and admission stops at the first one that does not fit (no overtaking).
- When the KV pool runs out, the *youngest* running request is preempted: its blocks are
  freed and it goes back to the head of the waiting queue, to be recomputed from its tokens
  (prefix caching usually gives most of them back). No new request is admitted in a step that
  preempted.
- So the oldest request is never preempted by a younger one and always makes progress; once
  it finishes, the next oldest becomes the oldest. Every request finishes.

Zero-overhead scheduling: ``schedule()`` may run before the tokens of the step in flight are
known. A granted step's KV counts as computed at once (the device runs steps in order), and a
request that samples in it holds an in-flight token that the next step can already feed back
in; ``update_from_output`` later replaces the in-flight token with the real one. A request
whose in-flight token is its last (max_tokens) is not scheduled again; one that turns out to
have stopped (EOS, a stop string) had one step's token computed in vain, which is discarded.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from deepinfer.config import SchedulerConfig
from deepinfer.engine.kv_manager import KVManager
from deepinfer.engine.request import Request, RequestStatus
from deepinfer.worker.protocol import CachedRequestData, ModelRunnerOutput, NewRequestData, SchedulerOutput


@dataclass
class StepResult:
    """What one model step did to the requests."""

    updated: list[Request]
    """Requests that received new tokens this step (including those that finished)."""
    new_token_counts: dict[str, int]


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_manager: KVManager) -> None:
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.kv = kv_manager
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self._runner_knows: set[str] = set()
        self._sent_blocks: dict[str, int] = {}
        """How many of each request's block ids the runner has been sent."""
        self._to_drop: set[str] = set()
        self.num_preemptions = 0

    # ---- requests in and out ----------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def finish_requests(self, request_ids: list[str], status: RequestStatus) -> list[Request]:
        """End requests (aborted, or stopped by a stop string); returns the ones that were live."""
        ended = []
        for rid in request_ids:
            request = self.requests.pop(rid, None)
            if request is None or request.is_finished:
                continue
            if request.status == RequestStatus.RUNNING:
                self.running.remove(request)
            else:
                self.waiting.remove(request)
            self._release(request, status)
            ended.append(request)
        return ended

    def _release(self, request: Request, status: RequestStatus) -> None:
        request.status = status
        request.metrics.finished_time = time.time()
        self.kv.free(request)
        self.kv.forget(request)
        self._drop_from_runner(request.request_id)

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.reset_for_recompute()
        self.waiting.appendleft(request)
        self.num_preemptions += 1
        self._drop_from_runner(request.request_id)

    def _drop_from_runner(self, request_id: str) -> None:
        """The runner forgets the request at the next step; if it comes back, it is sent in full."""
        if request_id in self._runner_knows:
            self._runner_knows.discard(request_id)
            self._to_drop.add(request_id)

    # ---- one step --------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        grants: dict[str, int] = {}
        preempted = False

        # Running requests, oldest first. Each wants the rest of its prefill (capped by the budget)
        # or one decode token.
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            num_new = min(request.num_scheduled_tokens - request.num_computed_tokens, budget)
            if num_new <= 0 or not request.can_schedule_more:
                i += 1
                continue
            while not self.kv.allocate(request, num_new):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is request:
                    break
            else:
                grants[request.request_id] = num_new
                budget -= num_new
                i += 1

        # Waiting requests, strictly in arrival order.
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not preempted:
            request = self.waiting[0]
            if request.num_inflight_tokens:  # preempted by this very call: its last token is not back yet
                break
            cached = self.kv.find_cached_prefix(request)
            num_cached_tokens = len(cached) * self.kv.block_size
            num_new = min(request.num_tokens - num_cached_tokens, budget)
            if not self.kv.allocate(request, num_new, cached):
                break
            self.waiting.popleft()
            if request.status == RequestStatus.WAITING:
                request.num_cached_tokens = num_cached_tokens
                request.metrics.first_scheduled_time = time.time()
            request.num_computed_tokens = num_cached_tokens
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            grants[request.request_id] = num_new
            budget -= num_new

        output = self._build_output(grants)
        for rid, num_new in grants.items():  # the step's KV is as good as written: the device runs steps in order
            request = self.requests[rid]
            request.num_computed_tokens += num_new
            if request.num_computed_tokens == request.num_scheduled_tokens:  # it samples a token
                request.num_inflight_tokens += 1
        return output

    def _build_output(self, grants: dict[str, int]) -> SchedulerOutput:
        # The runner applies drops before additions, so a request may be dropped and re-sent in full.
        dropped, self._to_drop = self._to_drop, set()
        for rid in dropped:
            self._sent_blocks.pop(rid, None)
        new, cached = [], []
        for rid in grants:
            request = self.requests[rid]
            blocks = self.kv.block_ids(rid)
            if rid in self._runner_knows:
                known = self._sent_blocks[rid]
                cached.append(CachedRequestData(rid, blocks[known:], request.num_computed_tokens))
            else:
                new.append(
                    NewRequestData(
                        request_id=rid,
                        prompt_token_ids=request.prompt_token_ids,
                        output_token_ids=list(request.output_token_ids),
                        sampling_params=request.sampling_params,
                        sampling_seed=request.sampling_seed,
                        block_ids=list(blocks),
                        state_slot=self.kv.state_slot(rid),
                        num_computed_tokens=request.num_computed_tokens,
                    )
                )
                self._runner_knows.add(rid)
            self._sent_blocks[rid] = len(blocks)
        return SchedulerOutput(new, cached, grants, finished_request_ids=dropped)

    def update_from_output(self, scheduled: SchedulerOutput, result: ModelRunnerOutput) -> StepResult:
        """Append a finished step's sampled tokens and apply token-level stop rules."""
        now = time.time()
        updated, counts = [], {}
        sampled = dict(zip(result.request_ids, result.sampled_token_ids))
        for rid in scheduled.num_scheduled_tokens:
            request = self.requests.get(rid)
            if request is None or request.is_finished:
                continue  # ended while the step ran: its token is discarded
            new_tokens = sampled.get(rid, [])
            if not new_tokens:
                self.kv.cache_computed_blocks(request)
                continue
            # Preempted while the step ran: the token is still right (its KV was complete when it
            # was sampled); it is kept and recomputed with the rest.
            request.num_inflight_tokens -= len(new_tokens)
            stop = None
            for count, token in enumerate(new_tokens, 1):
                request.append_output_token(token)
                stop = request.check_token_stop()
                if stop is not None:
                    break
            if request.metrics.first_token_time is None:
                request.metrics.first_token_time = now
            request.metrics.last_token_time = now
            counts[rid] = count
            updated.append(request)
            if stop is not None:
                self.finish_requests([rid], stop)
            else:
                self.kv.cache_computed_blocks(request)
        return StepResult(updated, counts)
