"""Latency arithmetic: percentiles, per-request TTFT / TPOT / end-to-end, the engine's step split."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from deepinfer.engine.llm_engine import StepTimings
from deepinfer.outputs import RequestOutput


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass
class Summary:
    """Distribution of one quantity over requests or iterations (p50 is the median)."""

    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Summary":
        return cls(mean=sum(values) / len(values), p50=percentile(values, 50), p90=percentile(values, 90),
                   p99=percentile(values, 99), min=min(values), max=max(values), count=len(values))


def tpot(first_token_time: float, finished_time: float, output_tokens: int) -> float | None:
    """Time per output token after the first: the first token's time is TTFT's, so the remaining
    ``output_tokens - 1`` tokens share the time between first token and finish. None for one token."""
    if output_tokens < 2:
        return None
    return (finished_time - first_token_time) / (output_tokens - 1)


@dataclass
class RequestTimes:
    """One request's latencies, in seconds."""

    ttft: float
    e2e: float
    tpot: float | None
    output_tokens: int

    @classmethod
    def of(cls, out: RequestOutput) -> "RequestTimes":
        m = out.metrics
        if m.first_token_time is None or m.finished_time is None:
            raise ValueError(f"request {out.request_id} has not finished; no latency to report")
        tokens = sum(len(c.token_ids) for c in out.outputs)
        return cls(ttft=m.first_token_time - m.arrival_time, e2e=m.finished_time - m.arrival_time,
                   tpot=tpot(m.first_token_time, m.finished_time, tokens), output_tokens=tokens)


@dataclass
class StepSplit:
    """Where the engine's step loop spent a timed run (``LLMEngine.step_timings`` after minus before).

    other_s is the rest of the wall time: the LLM API's loop around ``step()`` and request setup."""

    steps: int
    schedule_s: float
    execute_s: float
    """Launching steps: input preparation and queueing the device work."""
    wait_s: float
    """Blocked on the device for sampled tokens (with async scheduling, the device time the host
    had nothing left to overlap with)."""
    postprocess_s: float
    wall_s: float
    other_s: float
    schedule_ms_per_step: float
    execute_ms_per_step: float
    wait_ms_per_step: float
    postprocess_ms_per_step: float

    @classmethod
    def between(cls, before: StepTimings, after: StepTimings, wall_s: float) -> "StepSplit":
        steps = after.steps - before.steps
        schedule = after.schedule - before.schedule
        execute = after.execute - before.execute
        wait = after.wait - before.wait
        post = after.postprocess - before.postprocess
        per = 1000 / steps if steps else 0.0
        return cls(steps=steps, schedule_s=schedule, execute_s=execute, wait_s=wait, postprocess_s=post,
                   wall_s=wall_s, other_s=wall_s - schedule - execute - wait - post,
                   schedule_ms_per_step=schedule * per, execute_ms_per_step=execute * per,
                   wait_ms_per_step=wait * per, postprocess_ms_per_step=post * per)
