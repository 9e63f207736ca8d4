"""Where a window of engine steps spends its device time: torch.profiler over steps
[skip, skip + count) of a benchmark run, summarized per kernel, plus how much of the window the
device sat idle.

The idle share is what the CPU costs the GPU: the union of kernel intervals against the
window's span (first kernel start to last kernel end), so gaps between steps (scheduling,
input preparation, post-processing not hidden behind the device) show up as idle time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class KernelTime:
    name: str
    calls: int
    total_ms: float
    percent: float
    """Of the window's total kernel time."""


@dataclass
class StepProfile:
    skip_steps: int
    steps: int
    wall_ms_per_step: float
    """Host wall time of the profiled steps (profiler overhead included) per step."""
    kernel_ms_per_step: float
    """Sum of kernel durations per step."""
    busy_ms_per_step: float
    """Time at least one kernel ran, per step (overlapping kernels counted once)."""
    span_ms_per_step: float
    """First kernel start to last kernel end, per step."""
    idle_percent: float
    """Share of the span with no kernel running."""
    kernels: list[KernelTime] = field(default_factory=list)
    """The most expensive kernels, by total time."""


def _kernel_intervals(prof: Any) -> list[tuple[str, float, float]]:
    """(name, start_us, end_us) of every device kernel the profiler saw."""
    out = []
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        out.append((evt.name, float(evt.time_range.start), float(evt.time_range.end)))
    return out


def summarize(intervals: list[tuple[str, float, float]], steps: int, wall_s: float, skip: int,
              top: int = 25) -> StepProfile:
    per_name: dict[str, list[float]] = {}
    for name, start, end in intervals:
        per_name.setdefault(name, []).append(end - start)
    total_us = sum(sum(v) for v in per_name.values())
    busy_us, span_us = 0.0, 0.0
    if intervals:
        ordered = sorted((s, e) for _, s, e in intervals)
        span_us = max(e for _, e in ordered) - ordered[0][0]
        cur_s, cur_e = ordered[0]
        for s, e in ordered[1:]:
            if s > cur_e:
                busy_us += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy_us += cur_e - cur_s
    ranked = sorted(per_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    kernels = [KernelTime(name=name[:160], calls=len(d), total_ms=sum(d) / 1000,
                          percent=100 * sum(d) / total_us if total_us else 0.0) for name, d in ranked]
    n = max(steps, 1)
    return StepProfile(
        skip_steps=skip, steps=steps, wall_ms_per_step=wall_s * 1000 / n, kernel_ms_per_step=total_us / 1000 / n,
        busy_ms_per_step=busy_us / 1000 / n, span_ms_per_step=span_us / 1000 / n,
        idle_percent=100 * (1 - busy_us / span_us) if span_us else 0.0, kernels=kernels)


class StepProfiler:
    """Wraps ``engine.step`` so that steps [skip, skip + count) run under torch.profiler.

    ``result`` is set once the window has closed (None if the run had fewer steps)."""

    def __init__(self, engine: Any, skip: int, count: int) -> None:
        self.engine, self.skip, self.count = engine, skip, count
        self.result: StepProfile | None = None
        self._step = engine.step
        self._seen = 0
        self._prof = None
        self._t0 = 0.0
        engine.step = self._wrapped

    def _sync(self) -> None:
        if self.engine.device.type == "cuda":
            torch.cuda.synchronize(self.engine.device)

    def _wrapped(self):
        if self._seen == self.skip and self._prof is None and self.result is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.engine.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._sync()
            self._prof = torch.profiler.profile(activities=activities)
            self._prof.__enter__()
            self._t0 = time.perf_counter()
        outputs = self._step()
        self._seen += 1
        if self._prof is not None and self._seen == self.skip + self.count:
            self._sync()
            wall = time.perf_counter() - self._t0
            self._prof.__exit__(None, None, None)
            self.result = summarize(_kernel_intervals(self._prof), self.count, wall, self.skip)
            self._prof = None
        return outputs

    def close(self) -> StepProfile | None:
        """Restore ``engine.step``; a window still open (the run ended inside it) is summarized
        over the steps it saw."""
        if self._prof is not None:
            self._sync()
            wall = time.perf_counter() - self._t0
            self._prof.__exit__(None, None, None)
            self.result = summarize(_kernel_intervals(self._prof), self._seen - self.skip, wall, self.skip)
            self._prof = None
        self.engine.step = self._step
        return self.result


def format_profile(p: StepProfile) -> str:
    lines = [f"profile of steps {p.skip_steps}..{p.skip_steps + p.steps - 1}: wall {p.wall_ms_per_step:.3f} ms/step, "
             f"kernels {p.kernel_ms_per_step:.3f} ms/step, device busy {p.busy_ms_per_step:.3f} of "
             f"{p.span_ms_per_step:.3f} ms/step (idle {p.idle_percent:.1f}%)",
             f"{'ms/step':>9} {'%':>6} {'calls/step':>10}  kernel"]
    n = max(p.steps, 1)
    for k in p.kernels:
        lines.append(f"{k.total_ms / n:9.3f} {k.percent:6.1f} {k.calls / n:10.1f}  {k.name[:110]}")
    return "\n".join(lines)
