"""``deepinfer bench latency``: how long one batch of requests takes, end to end.

Each iteration generates ``batch_size`` fresh prompts (fresh so that the prefix cache cannot skip
their prefill) of ``output_len`` tokens each; after the warm-up iterations, every timed one gives
an end-to-end time, a TTFT and a TPOT, summarized over the iterations.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Sequence

from tqdm import tqdm

from deepinfer import envs
from deepinfer.bench.args import BenchArgs
from deepinfer.bench.datasets import load_prompts
from deepinfer.bench.environment import describe_environment
from deepinfer.bench.hf_baseline import RANDOM_INIT_NOTE, HFModelInfo, hf_generate, hf_warmup, load_hf_model
from deepinfer.bench.metrics import RequestTimes, StepSplit, Summary
from deepinfer.bench.report import BenchResult, Roofline, Workload, format_footer, format_step_split
from deepinfer.bench.roofline import decode_bound, format_rates, measure_device
from deepinfer.bench.step_profile import StepProfile, StepProfiler
from deepinfer.bench.session import (ModelFacts, engine_kwargs_for, free_device_memory, open_engine,
                                     snapshot_timings)
from deepinfer.sampling_params import SamplingParams


@dataclass
class IterationTimes:
    """One iteration, in seconds; ttft and tpot are the means over its requests."""

    e2e: float
    ttft: float
    tpot: float


@dataclass
class LatencyMetrics:
    batch_size: int
    output_len: int
    num_iters: int
    e2e_s: Summary
    """Wall time of an iteration: the batch's requests from submission to the last token."""
    ttft_s: Summary
    tpot_s: Summary
    """Per output token after the first: (finished - first token) / (output_len - 1)."""
    decode_tok_s_per_seq: Summary
    """Decode speed of one sequence, 1 / TPOT: the output_len - 1 tokens after the first over the
    time they took (e2e - TTFT); output_len / (e2e - TTFT) would count the first token twice."""
    output_tok_s: Summary
    """All the batch's output tokens over the iteration's wall time."""
    iterations: list[IterationTimes]

    @classmethod
    def of(cls, iterations: Sequence[IterationTimes], batch_size: int, output_len: int) -> "LatencyMetrics":
        return cls(batch_size=batch_size, output_len=output_len, num_iters=len(iterations),
                   e2e_s=Summary.of([i.e2e for i in iterations]), ttft_s=Summary.of([i.ttft for i in iterations]),
                   tpot_s=Summary.of([i.tpot for i in iterations]),
                   decode_tok_s_per_seq=Summary.of([1 / i.tpot for i in iterations]),
                   output_tok_s=Summary.of([batch_size * output_len / i.e2e for i in iterations]),
                   iterations=list(iterations))


@dataclass
class LatencyBaseline:
    engine: str
    model: HFModelInfo
    batch_size: int
    metrics: LatencyMetrics


def _iteration_prompts(prompts: list[list[int]], batch_size: int, index: int) -> list[list[int]]:
    return prompts[index * batch_size:(index + 1) * batch_size]


def measure_latency(llm, prompts: list[list[int]],
                    args: BenchArgs) -> tuple[LatencyMetrics, StepSplit, StepProfile | None]:
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    for i in range(args.num_iters_warmup):
        llm.generate(_iteration_prompts(prompts, args.batch_size, i), params, use_tqdm=False)
    before, iterations, wall = snapshot_timings(llm), [], 0.0
    profiler = StepProfiler(llm.engine, args.profile_skip_steps, args.profile_steps) if args.profile_steps else None
    bar = tqdm(range(args.num_iters), desc="Latency iterations", disable=not envs.DEEPINFER_TQDM)
    for i in bar:
        batch = _iteration_prompts(prompts, args.batch_size, args.num_iters_warmup + i)
        start = time.perf_counter()
        outputs = llm.generate(batch, params, use_tqdm=False)
        e2e = time.perf_counter() - start
        wall += e2e
        times = [RequestTimes.of(o) for o in outputs]
        if any(t.output_tokens != args.output_len for t in times):
            raise RuntimeError(f"a request generated {[t.output_tokens for t in times]} tokens, not {args.output_len}")
        iterations.append(IterationTimes(e2e=e2e, ttft=sum(t.ttft for t in times) / len(times),
                                         tpot=sum(t.tpot for t in times) / len(times)))
    split = StepSplit.between(before, snapshot_timings(llm), wall)
    profile = profiler.close() if profiler is not None else None
    return LatencyMetrics.of(iterations, args.batch_size, args.output_len), split, profile


def hf_latency(facts: ModelFacts, prompts: list[list[int]], args: BenchArgs) -> LatencyBaseline:
    """The same iterations with transformers: one batch (it keeps no cache between calls, so the
    same prompts every time is fair), warm-up then timed calls."""
    batch_size = args.hf_batch_size or args.batch_size
    batch = prompts[:batch_size]
    model, info = load_hf_model(facts)
    try:
        hf_warmup(model, batch, facts.pad_token_id)
        for _ in range(args.num_iters_warmup):
            hf_generate(model, batch, args.output_len, facts.pad_token_id)
        iterations = []
        for _ in tqdm(range(args.num_iters), desc="transformers iterations", disable=not envs.DEEPINFER_TQDM):
            t = hf_generate(model, batch, args.output_len, facts.pad_token_id)
            iterations.append(IterationTimes(e2e=t.seconds, ttft=t.ttft_s,
                                             tpot=(t.seconds - t.ttft_s) / (args.output_len - 1)))
    finally:
        del model
        free_device_memory(facts.device)
    return LatencyBaseline(engine="transformers generate", model=info, batch_size=batch_size,
                           metrics=LatencyMetrics.of(iterations, batch_size, args.output_len))


def run_latency(args: BenchArgs, engine_kwargs: dict[str, Any], command: str) -> BenchResult:
    if args.output_len < 2:
        raise ValueError("latency needs output_len >= 2 (TPOT is the time per token after the first)")
    count = max((args.num_iters_warmup + args.num_iters) * args.batch_size, args.hf_batch_size or 0)
    prompts = load_prompts(args.dataset, count, args.input_len, args.dataset_seed, engine_kwargs.get("model"),
                           engine_kwargs.get("tokenizer"))
    llm = open_engine(engine_kwargs_for(engine_kwargs, prompts, args.output_len))
    metrics, split, profile = measure_latency(llm, prompts, args)
    facts = ModelFacts.of(llm)
    del llm  # the baseline and the roofline's buffers need the device memory the KV cache holds
    left_gib = free_device_memory(facts.device)
    timed = prompts[args.num_iters_warmup * args.batch_size:]
    result = BenchResult(
        benchmark="latency", command=command, args=dataclasses.asdict(args), engine_config=facts.engine_config,
        engine={**facts.resolved(), "device_memory_after_free_gib": left_gib}, environment=describe_environment(),
        workload=Workload.of(args.dataset, timed[:args.num_iters * args.batch_size], args.output_len,
                             args.dataset_seed),
        metrics=metrics, step_split=split, profile=profile)
    if args.roofline:
        rates = measure_device(facts.device)
        mean_len = result.workload.prompt_len.mean
        result.roofline = Roofline(rates, decode_bound(facts.stats, rates, args.batch_size, mean_len, args.output_len,
                                                       metrics.decode_tok_s_per_seq.p50))
    if args.compare_hf:
        result.baseline = hf_latency(facts, prompts, args)
        ours, theirs = metrics, result.baseline.metrics
        result.speedup = {"e2e_latency_p50": theirs.e2e_s.p50 / ours.e2e_s.p50,
                          "decode_tok_s_per_seq_p50": ours.decode_tok_s_per_seq.p50 / theirs.decode_tok_s_per_seq.p50,
                          "ttft_p50": theirs.ttft_s.p50 / ours.ttft_s.p50}
        if result.baseline.model.source == "from_config":
            result.notes.append(RANDOM_INIT_NOTE)
    return result


def format_latency(result: BenchResult) -> str:
    m: LatencyMetrics = result.metrics
    w = result.workload
    lines = [f"latency: {result.engine['model_path']} ({result.engine['dtype']}, {result.engine['device']}), "
             f"batch {m.batch_size}, {w.prompt_len.mean:.0f} tokens in, {m.output_len} out, {m.num_iters} iterations",
             f"{'':>26} {'mean':>10} {'median':>10} {'p90':>10} {'p99':>10}"]

    def row(name: str, s: Summary, scale: float = 1.0, fmt: str = "10.2f") -> str:
        return f"{name:>26} " + " ".join(format(v * scale, fmt) for v in (s.mean, s.p50, s.p90, s.p99))

    def block(label: str, lm: LatencyMetrics) -> None:
        lines.append(f"-- {label}")
        lines.append(row("e2e latency (ms)", lm.e2e_s, 1000))
        lines.append(row("TTFT (ms)", lm.ttft_s, 1000))
        lines.append(row("TPOT (ms)", lm.tpot_s, 1000, "10.3f"))
        lines.append(row("decode tok/s per sequence", lm.decode_tok_s_per_seq, 1, "10.1f"))

    block("deepinfer", m)
    lines.append(format_step_split(result.step_split))
    if result.baseline is not None:
        block(f"transformers generate (batch {result.baseline.batch_size}, {result.baseline.model.source})",
              result.baseline.metrics)
        lines.append("speedup: " + ", ".join(f"{k} {v:.2f}x" for k, v in result.speedup.items()))
    if result.roofline is not None:
        r, b = result.roofline.device, result.roofline.bound
        lines.append(f"roofline: {format_rates(r)}; decode bound {b.tok_s_per_seq:.1f} tok/s per sequence "
                     f"({b.bytes_per_step / 1e6:.1f} MB per step); deepinfer at {b.percent_of_bound:.1f}%")
    return "\n".join(lines + format_footer(result))
