"""A benchmark's result: one typed record, written as JSON (and a PNG plot next to it)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepinfer.bench.metrics import StepSplit, Summary
from deepinfer.bench.roofline import DecodeBound, DeviceRates, ThroughputBound
from deepinfer.bench.step_profile import StepProfile, format_profile


@dataclass
class Workload:
    dataset: str
    num_prompts: int
    prompt_len: Summary
    prompt_tokens: int
    output_len: int
    output_tokens: int
    dataset_seed: int

    @classmethod
    def of(cls, dataset: str, prompts: list[list[int]], output_len: int, seed: int) -> "Workload":
        lens = [len(p) for p in prompts]
        return cls(dataset=dataset, num_prompts=len(prompts), prompt_len=Summary.of(lens), prompt_tokens=sum(lens),
                   output_len=output_len, output_tokens=len(prompts) * output_len, dataset_seed=seed)


@dataclass
class Roofline:
    device: DeviceRates
    bound: DecodeBound | ThroughputBound


@dataclass
class BenchResult:
    benchmark: str
    """latency or throughput."""
    command: str
    """A command line that repeats this run (every flag that differs from its default)."""
    args: dict[str, Any]
    engine_config: dict[str, Any]
    """``dataclasses.asdict(llm.config)``: the engine settings as given."""
    engine: dict[str, Any]
    """What the engine resolved them to, and the model's sizes."""
    environment: dict[str, Any]
    workload: Workload
    metrics: Any
    """LatencyMetrics or ThroughputMetrics."""
    step_split: StepSplit
    roofline: Roofline | None = None
    baseline: Any = None
    """LatencyBaseline or ThroughputBaseline (transformers), when asked for."""
    speedup: dict[str, float] | None = None
    """deepinfer over transformers, > 1 is faster."""
    profile: StepProfile | None = None
    """Per-kernel device time of the profiled steps (``--profile-steps``)."""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def format_step_split(s: StepSplit) -> str:
    return (f"step split ({s.steps} steps): schedule {s.schedule_ms_per_step:.3f} ms, execute "
            f"{s.execute_ms_per_step:.3f} ms, wait {s.wait_ms_per_step:.3f} ms, postprocess "
            f"{s.postprocess_ms_per_step:.3f} ms per step; outside steps {s.other_s:.3f} s of {s.wall_s:.3f} s")


def format_footer(result: BenchResult) -> list[str]:
    """The lines every benchmark's summary ends with: the profile, if any, and the notes."""
    lines = [format_profile(result.profile)] if result.profile is not None else []
    return lines + [f"note: {note}" for note in result.notes]


def write_result(result: BenchResult, path: str | Path) -> Path:
    """Write the JSON to ``path`` and the plot next to it; returns the plot's path."""
    from deepinfer.bench.plots import plot_result

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    png = path.with_suffix(".png")
    plot_result(result, png)
    return png
