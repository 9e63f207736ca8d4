"""LLMEngine: requests in, RequestOutputs out, one ``step()`` at a time.

It opens the checkpoint, resolves what the config left to the model (dtype, context length),
builds the worker, KV manager, scheduler and output processor, and validates every request
before it touches any of them, so a bad request never disturbs the others.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import Any

import torch

from deepinfer import envs
from deepinfer.config import EngineConfig
from deepinfer.default_model import embedded_model_path
from deepinfer.engine.kv_manager import KVManager
from deepinfer.engine.output import OutputProcessor
from deepinfer.engine.request import Request, RequestStatus
from deepinfer.engine.scheduler import Scheduler
from deepinfer.logger import init_logger
from deepinfer.models.checkpoint import open_checkpoint
from deepinfer.models.registry import resolve_model_class
from deepinfer.outputs import RequestOutput
from deepinfer.sampling_params import SamplingParams
from deepinfer.worker.model_runner import PendingStep
from deepinfer.worker.protocol import SchedulerOutput
from deepinfer.worker.worker import ModelSpec, Worker

logger = init_logger(__name__)


@dataclass
class StepTimings:
    """Wall-clock seconds spent in each part of ``step()``, summed over all steps so far."""

    steps: int = 0
    """Model steps launched."""
    schedule: float = 0.0
    execute: float = 0.0
    """The worker launching a step: input preparation and queueing the forward pass and sampler."""
    wait: float = 0.0
    """Blocked on the device for a step's sampled ids."""
    postprocess: float = 0.0
    """Scheduler update, detokenization, stop checks, outputs."""

    def as_dict(self) -> dict[str, float]:
        return {"steps": self.steps, "schedule_s": self.schedule, "execute_s": self.execute, "wait_s": self.wait,
                "postprocess_s": self.postprocess}


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_hit_rate: float
    num_preemptions: int
    step_timings: StepTimings


def _resolve_dtype(requested: str, hf_config: Any, is_gguf: bool, device: torch.device) -> torch.dtype:
    if requested != "auto":
        return getattr(torch, requested)
    if is_gguf:  # quantized weights: dequantize to the device's natural compute type
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtype = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float32


def _resolve_max_model_len(requested: int | None, hf_config: Any) -> int:
    limit = getattr(hf_config, "max_position_embeddings", None)
    if requested is None:
        if limit is None:
            raise ValueError("the model config has no max_position_embeddings; pass max_model_len")
        return int(limit)
    if limit is not None and requested > limit:
        raise ValueError(f"max_model_len={requested} is longer than the model's context ({limit}); lower it")
    return requested


def _resolve_async_scheduling(requested: bool | None, device: torch.device) -> bool:
    if requested is not None:
        return requested
    if envs.ENV_VARS["DEEPINFER_ZERO_OVERHEAD_SCHEDULING"].is_set():
        return envs.DEEPINFER_ZERO_OVERHEAD_SCHEDULING
    return device.type == "cuda"


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        model_path = config.model.model or embedded_model_path()
        checkpoint = open_checkpoint(model_path, config.model.tokenizer)
        hf_config = checkpoint.hf_config()
        resolve_model_class(hf_config)  # fail on an unsupported architecture before reading weights
        device = torch.device(config.device.resolve())
        self.model_path = model_path
        self.max_model_len = _resolve_max_model_len(config.model.max_model_len, hf_config)
        self.tokenizer = checkpoint.tokenizer()  # None for a config-only model: token ids in and out
        eos = set(checkpoint.eos_token_ids())
        if getattr(self.tokenizer, "eos_token_id", None) is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(eos)
        self.vocab_size = int(hf_config.vocab_size)
        dtype = _resolve_dtype(config.model.dtype, hf_config, checkpoint.format == "gguf", device)
        torch.manual_seed(config.model.seed)
        spec = ModelSpec(hf_config, dtype, device, self.max_model_len, self.eos_token_ids)
        self.worker = Worker(config, checkpoint, spec)
        self.kv_manager = KVManager(self.worker.num_blocks, config.cache.block_size,
                                    num_state_slots=config.scheduler.max_num_seqs,
                                    enable_prefix_caching=config.cache.enable_prefix_caching)
        self.scheduler = Scheduler(config.scheduler, self.kv_manager)
        self.output_processor = OutputProcessor(self.tokenizer)
        self.dtype, self.device = dtype, device
        self._rng = random.Random(config.model.seed)
        self._arrivals = itertools.count()
        self._request_counter = itertools.count()
        self.step_timings = StepTimings()
        self.async_scheduling = _resolve_async_scheduling(config.scheduler.async_scheduling, device)
        self._in_flight: tuple[SchedulerOutput, PendingStep] | None = None
        """The launched step whose tokens the host has not processed yet (zero-overhead scheduling)."""
        logger.info("engine ready: %s (%s, %s, max_model_len=%d)", model_path, dtype, device, self.max_model_len)

    # ---- requests ----------------------------------------------------------------------------
    def new_request_id(self) -> str:
        return str(next(self._request_counter))

    def validate_request(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError if the request cannot run; nothing is changed."""
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        if len(prompt_token_ids) == 0:
            raise ValueError("the prompt is empty; give at least one token")
        bad = [t for t in prompt_token_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]!r} is not in the vocabulary [0, {self.vocab_size})")
        if len(prompt_token_ids) >= self.max_model_len:
            raise ValueError(
                f"the prompt has {len(prompt_token_ids)} tokens but max_model_len is {self.max_model_len}; "
                f"shorten it to at most {self.max_model_len - 1} tokens or raise max_model_len"
            )
        if params.stop and self.tokenizer is None:
            raise ValueError("SamplingParams.stop needs a tokenizer and this model has none; use stop_token_ids")
        if params.logprobs is not None and params.logprobs > self.config.model.max_logprobs:
            raise ValueError(
                f"SamplingParams.logprobs={params.logprobs} is more than max_logprobs={self.config.model.max_logprobs}"
            )
        bad = [t for t in params.stop_token_ids if t >= self.vocab_size]
        if bad:
            raise ValueError(f"SamplingParams.stop_token_ids has {bad[0]}, outside the vocabulary [0, {self.vocab_size})")

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    prompt: str | None = None, stream: bool = False) -> None:
        """Queue a request. ``stream``: ``step()`` reports it after every step that adds tokens;
        otherwise only once, when it finishes (building outputs every step costs O(length))."""
        if request_id in self.output_processor.parents:
            raise ValueError(f"request id {request_id!r} is already in use")
        self.validate_request(prompt_token_ids, params)
        base_seed = params.seed if params.seed is not None else self._rng.getrandbits(62)
        arrival = time.time()
        samples = [
            Request(
                request_id if params.n == 1 else f"{request_id}#{i}",
                prompt_token_ids,
                params,
                # Sample i of a seeded request uses seed + i: sample 0 equals the same request with n=1.
                sampling_seed=base_seed + i,
                eos_token_ids=self.eos_token_ids,
                max_model_len=self.max_model_len,
                arrival_order=next(self._arrivals),
                parent_id=request_id,
                sample_index=i,
                arrival_time=arrival,
            )
            for i in range(params.n)
        ]
        self.output_processor.add(request_id, prompt, samples, stream)
        for req in samples:
            self.scheduler.add_request(req)

    def abort_request(self, request_ids: list[str]) -> None:
        for parent_id in request_ids:
            parent = self.output_processor.parents.get(parent_id)
            if parent is None:
                continue
            for req in self.scheduler.finish_requests([r.request_id for r in parent.requests],
                                                      RequestStatus.FINISHED_ABORTED):
                self.output_processor.mark_aborted(req)
            self.output_processor.release(parent_id)
        if not self.scheduler.has_unfinished_requests():
            self._in_flight = None  # its tokens belong to no live request

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests() or self._in_flight is not None

    # ---- the step ----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one model step; return the outputs of the prompts it finished, and of streamed
        prompts that got new tokens.

        With async scheduling the step launched here is processed by the next call, and this
        call processes the one launched before: the host schedules and post-processes while the
        device computes."""
        if not self.has_unfinished_requests():
            return []
        timings = self.step_timings
        t0 = time.perf_counter()
        scheduled = self.scheduler.schedule()
        t1 = time.perf_counter()
        launched = None
        if not scheduled.is_empty:
            launched = (scheduled, self.worker.execute_model(scheduled))
        elif self._in_flight is None:
            raise RuntimeError("the scheduler could not schedule any request; this is a bug, please report it")
        t2 = time.perf_counter()
        timings.schedule += t1 - t0
        timings.execute += t2 - t1
        if self.async_scheduling:
            done, self._in_flight = self._in_flight, launched
        else:
            done = launched
        outputs = self._process(*done) if done is not None else []
        timings.steps += launched is not None
        return outputs

    def _process(self, scheduled: SchedulerOutput, pending: PendingStep) -> list[RequestOutput]:
        """Read a launched step's tokens and turn them into request updates and outputs."""
        t0 = time.perf_counter()
        result = pending.result()
        t1 = time.perf_counter()
        step = self.scheduler.update_from_output(scheduled, result)
        logprobs = dict(zip(result.request_ids, result.logprobs))
        stopped = self.output_processor.process(step.updated, step.new_token_counts, logprobs)
        if stopped:
            self.scheduler.finish_requests(stopped, RequestStatus.FINISHED_STOPPED)
        outputs = []
        for parent in dict.fromkeys(self.output_processor.parent_of(r.request_id) for r in step.updated):
            if not (parent.finished or parent.stream):
                continue
            out = self.output_processor.make_output(parent.request_id)
            if out.finished:
                self.output_processor.release(parent.request_id)
            outputs.append(out)
        self.step_timings.wait += t1 - t0
        self.step_timings.postprocess += time.perf_counter() - t1
        return outputs

    def stats(self) -> EngineStats:
        s = self.kv_manager.stats
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_cache_usage=self.kv_manager.usage,
            prefix_cache_queries=s.queries,
            prefix_cache_hits=s.hits,
            prefix_cache_hit_rate=s.hit_rate,
            num_preemptions=self.scheduler.num_preemptions,
            step_timings=self.step_timings,
        )
