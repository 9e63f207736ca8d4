"""Model runner: keeps the per-request state the model needs, turns a SchedulerOutput into one
flat batch, runs the forward pass and samples.

Batch order: requests with one query token (decodes) first, then prefill chunks, so the
attention backend can treat the decodes as one block.

A step is launched, not waited for: ``execute_model`` queues the forward pass and the sampler
and returns a PendingStep whose ``result()`` later reads the sampled ids back. Until then each
sampling request holds a placeholder for its new token, and a following step that feeds that
token back in takes it from the previous step's sampled ids on the device. So the engine can
schedule and launch step N+1 before it has seen step N's tokens (zero-overhead scheduling), and
the only point where the host waits for the device is ``PendingStep.result()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from deepinfer.layers.attention import AttentionBackend, AttentionBatch
from deepinfer.layers.sampler import RowPenalties, Sampler, SamplerOutput, SamplingBatch
from deepinfer.sampling_params import SamplingParams
from deepinfer.transfer import HostCopy, to_device
from deepinfer.worker.cache_engine import CacheEngine
from deepinfer.worker.cuda_graph import CUDAGraphRunner
from deepinfer.worker.protocol import ModelRunnerOutput, NewRequestData, SchedulerOutput, TokenLogprobs

PLACEHOLDER = -1
"""Token id of a sampled token the host has not read back yet."""


@dataclass
class RunnerRequest:
    """The runner's copy of one request: its tokens, blocks and sampling rules."""

    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    sampling_params: SamplingParams
    sampling_seed: int
    block_ids: list[int]
    state_slot: int
    num_computed_tokens: int
    prompt_tensor: torch.Tensor | None = field(default=None, repr=False)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @classmethod
    def from_new(cls, data: NewRequestData) -> "RunnerRequest":
        return cls(
            request_id=data.request_id,
            token_ids=data.prompt_token_ids + data.output_token_ids,
            num_prompt_tokens=len(data.prompt_token_ids),
            sampling_params=data.sampling_params,
            sampling_seed=data.sampling_seed,
            block_ids=list(data.block_ids),
            state_slot=data.state_slot,
            num_computed_tokens=data.num_computed_tokens,
        )


def row_seed(request_seed: int, output_index: int) -> int:
    """Seed of the noise for one request's ``output_index``-th token.

    A pure function of the request's seed and the position, so sampling does not depend on
    the batch, on other requests, or on whether the request was preempted and recomputed.
    """
    x = (request_seed * 0x9E3779B97F4A7C15 + output_index * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF


class ModelRunner:
    def __init__(
        self,
        model: torch.nn.Module,
        cache_engine: CacheEngine,
        attn_backend: AttentionBackend,
        block_size: int,
        device: torch.device,
        eos_token_ids: frozenset[int],
    ) -> None:
        self.model = model
        self.cache_engine = cache_engine
        self.attn_backend = attn_backend
        self.block_size = block_size
        self.device = device
        self.eos_token_ids = eos_token_ids
        self.sampler = Sampler()
        self.requests: dict[str, RunnerRequest] = {}
        self.graph_runner: CUDAGraphRunner | None = None
        """Set by the worker when decode steps run as CUDA graphs."""
        self._last_sampled: torch.Tensor | None = None
        """The sampled ids of the last step that sampled, on the device."""
        self._last_sampled_row: dict[str, int] = {}
        """Request id -> its row in ``_last_sampled``."""

    # ---- state -------------------------------------------------------------------------------
    def _update_states(self, scheduled: SchedulerOutput) -> None:
        for rid in scheduled.finished_request_ids:
            self.requests.pop(rid, None)
        fresh_blocks: list[int] = []
        for data in scheduled.new_requests:
            self.requests[data.request_id] = RunnerRequest.from_new(data)
            # Blocks before num_computed_tokens are prefix-cache hits and hold valid KV.
            fresh_blocks += data.block_ids[data.num_computed_tokens // self.block_size :]
        for delta in scheduled.cached_requests:
            state = self.requests[delta.request_id]
            state.block_ids.extend(delta.new_block_ids)
            state.num_computed_tokens = delta.num_computed_tokens
            fresh_blocks += delta.new_block_ids
        self.cache_engine.zero_blocks(fresh_blocks)

    # ---- one step ----------------------------------------------------------------------------
    @torch.inference_mode()
    def execute_model(self, scheduled: SchedulerOutput) -> "PendingStep":
        """Queue one step on the device; its sampled tokens come from the returned PendingStep."""
        self._update_states(scheduled)
        grants = scheduled.num_scheduled_tokens
        order = sorted(grants, key=lambda rid: grants[rid] != 1)  # stable: decodes first
        states = [self.requests[rid] for rid in order]
        counts = np.array([grants[rid] for rid in order], dtype=np.int64)
        input_ids, positions, batch, fed_back = self._prepare_inputs(states, counts)
        # Only requests whose every known token is now computed produce a token; a partial
        # prefill chunk does not.
        sampling = [i for i, s in enumerate(states) if s.num_computed_tokens + counts[i] == len(s.token_ids)]
        for state, count in zip(states, counts):
            state.num_computed_tokens += int(count)
        ids = to_device(input_ids, self.device)
        if fed_back:  # tokens sampled by the previous step, still on the device
            rows, src = zip(*fed_back)
            ids[to_device(list(rows), self.device)] = self._last_sampled[to_device(list(src), self.device)]
        logits = self._forward(ids, positions, batch, sampling)  # runs even if nothing samples: it writes KV
        pending = PendingStep(self, order)
        if sampling:
            sampling_states = [states[i] for i in sampling]
            result = self.sampler(logits, self._sampling_batch(sampling_states))
            pending.launch(result, sampling, sampling_states)
            self._last_sampled = result.sampled
            self._last_sampled_row = {s.request_id: j for j, s in enumerate(sampling_states)}
        return pending

    def _forward(self, input_ids: torch.Tensor, positions: np.ndarray, batch: AttentionBatch,
                 sampling: list[int]) -> torch.Tensor | None:
        """Run the model on the batch (writing its KV); return the logits at the last new token
        of each sampling request, or None if no request samples."""
        if self.graph_runner is not None and self.graph_runner.can_run(batch):
            logits = self.graph_runner.run(input_ids, positions, batch)
            if len(sampling) == batch.num_requests:
                return logits
            return logits[to_device(sampling, self.device)] if sampling else None
        metadata = self.attn_backend.build_metadata(batch, self.cache_engine.kv_caches, self.device)
        hidden = self.model(input_ids, to_device(positions, self.device), metadata)
        if not sampling:
            return None
        last_token_rows = to_device(batch.query_start_loc[1:][sampling] - 1, self.device)
        return self.model.compute_logits(hidden[last_token_rows])

    def _prepare_inputs(self, states: list[RunnerRequest], counts: np.ndarray):
        bs = self.block_size
        starts = np.array([s.num_computed_tokens for s in states], dtype=np.int64)
        query_start_loc = np.zeros(len(states) + 1, dtype=np.int64)
        np.cumsum(counts, out=query_start_loc[1:])
        if len(states) == int(query_start_loc[-1]):  # every request has one token: the common decode step
            positions = starts
            input_ids = np.array([s.token_ids[st] for s, st in zip(states, starts.tolist())], dtype=np.int64)
            block_of_token = np.array([s.block_ids[st // bs] for s, st in zip(states, starts.tolist())],
                                      dtype=np.int64)
        else:
            positions = np.concatenate([np.arange(st, st + n) for st, n in zip(starts, counts)])
            input_ids = np.concatenate([s.token_ids[st : st + n] for s, st, n in zip(states, starts, counts)])
            block_of_token = np.concatenate([np.asarray(s.block_ids, dtype=np.int64)[np.arange(st, st + n) // bs]
                                             for s, st, n in zip(states, starts, counts)])
        # A decode's input is the token its previous step sampled; if the host has not read it
        # yet (a placeholder), it is taken from that step's sampled ids on the device.
        fed_back = [(int(query_start_loc[i]), self._last_sampled_row[s.request_id])
                    for i in np.flatnonzero(counts == 1).tolist() for s in (states[i],)
                    if s.token_ids[int(starts[i])] == PLACEHOLDER]
        batch = AttentionBatch(
            query_start_loc=query_start_loc,
            seq_lens=starts + counts,
            block_tables=[s.block_ids for s in states],
            slot_mapping=block_of_token * bs + positions % bs,
            num_decodes=int(np.count_nonzero(counts == 1)),
            block_size=bs,
        )
        return input_ids.astype(np.int64), positions, batch, fed_back

    def _sampling_batch(self, states: list[RunnerRequest]) -> SamplingBatch:
        params = [s.sampling_params for s in states]
        dev = self.device
        penalties, suppressed = {}, {}
        for row, (s, p) in enumerate(zip(states, params)):
            if p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0:
                if s.prompt_tensor is None:
                    s.prompt_tensor = to_device(s.token_ids[: s.num_prompt_tokens], dev, torch.long)
                penalties[row] = RowPenalties(
                    prompt_token_ids=s.prompt_tensor,
                    output_token_ids=self._output_token_tensor(s),
                    presence=p.presence_penalty,
                    frequency=p.frequency_penalty,
                    repetition=p.repetition_penalty,
                )
            if s.num_output_tokens < p.min_tokens:
                stops = set(p.stop_token_ids) | (set() if p.ignore_eos else set(self.eos_token_ids))
                if stops:
                    suppressed[row] = sorted(stops)
        wanted = [p.logprobs for p in params if p.logprobs is not None]
        batch = SamplingBatch(
            seeds=[None if p.greedy else row_seed(s.sampling_seed, s.num_output_tokens) for s, p in zip(states, params)],
            penalties=penalties,
            suppressed=suppressed,
            num_logprobs=max(wanted) if wanted else None,
        )
        if not batch.all_greedy:
            random = [p for p in params if not p.greedy]
            batch.max_top_k = max(p.top_k for p in random)
            batch.uses_top_p = any(p.top_p < 1 for p in random)
            batch.uses_min_p = any(p.min_p > 0 for p in random)
            batch.temperature = to_device([float(p.temperature) for p in params], dev, torch.float32)
            batch.top_k = to_device([int(p.top_k) for p in params], dev, torch.long)
            batch.top_p = to_device([float(p.top_p) for p in params], dev, torch.float32)
            batch.min_p = to_device([float(p.min_p) for p in params], dev, torch.float32)
        return batch

    def _output_token_tensor(self, state: RunnerRequest) -> torch.Tensor:
        """The request's output tokens on the device; an in-flight last token is taken from the
        previous step's sampled ids."""
        known = state.token_ids[state.num_prompt_tokens:]
        if not known or known[-1] != PLACEHOLDER:
            return to_device(known, self.device, torch.long)
        last = self._last_sampled[self._last_sampled_row[state.request_id]].view(1)
        return torch.cat((to_device(known[:-1], self.device, torch.long), last))


class PendingStep:
    """One launched step: its sampled ids (and log-probabilities) are being copied to the host."""

    def __init__(self, runner: ModelRunner, request_ids: list[str]) -> None:
        self.runner = runner
        self.request_ids = request_ids
        self._rows: list[int] = []
        self._slots: list[tuple[RunnerRequest, int]] = []
        self._copy: HostCopy | None = None
        self._result: ModelRunnerOutput | None = None

    def launch(self, result: SamplerOutput, rows: list[int], states: list[RunnerRequest]) -> None:
        """Queue the copies of the step's samples; each request gets a placeholder token."""
        self._rows = rows
        for state in states:
            self._slots.append((state, len(state.token_ids)))
            state.token_ids.append(PLACEHOLDER)
        self._copy = HostCopy({"sampled": result.sampled, "sampled_logprob": result.sampled_logprob,
                               "sampled_rank": result.sampled_rank, "top_token_ids": result.top_token_ids,
                               "top_logprobs": result.top_logprobs})

    def result(self) -> ModelRunnerOutput:
        """Wait for the step's tokens, put them in place of the placeholders and return them."""
        if self._result is not None:
            return self._result
        n = len(self.request_ids)
        sampled_per_request: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[TokenLogprobs | None] = [None] * n
        if self._copy is not None:
            host = {k: (v.tolist() if v is not None else None) for k, v in self._copy.wait().items()}
            live = self.runner.requests
            for j, (row, (state, index)) in enumerate(zip(self._rows, self._slots)):
                token = host["sampled"][j]
                if live.get(state.request_id) is state:  # else dropped (finished, aborted, preempted)
                    state.token_ids[index] = token
                sampled_per_request[row] = [token]
                n_top = state.sampling_params.logprobs
                if host["sampled_logprob"] is not None and n_top is not None:
                    ids = host["top_token_ids"][j][:n_top] if n_top else []
                    lps = host["top_logprobs"][j][:n_top] if n_top else []
                    ranks = list(range(1, len(ids) + 1))
                    if token not in ids:
                        ids = ids + [token]
                        lps = lps + [host["sampled_logprob"][j]]
                        ranks = ranks + [host["sampled_rank"][j]]
                    logprobs[row] = TokenLogprobs(ids, lps, ranks)
        self._result = ModelRunnerOutput(self.request_ids, sampled_per_request, logprobs)
        return self._result
