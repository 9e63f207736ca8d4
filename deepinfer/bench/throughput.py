"""``deepinfer bench throughput``: offline generation, every prompt submitted at once.

Every request generates exactly ``output_len`` tokens (EOS ignored) so that both engines do the
same work. Rates are over the wall time of one ``llm.generate`` call after a short warm-up; the
latencies come from each request's own timestamps (offline, so TTFT includes queueing).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from deepinfer import envs
from deepinfer.bench.args import BenchArgs
from deepinfer.bench.datasets import load_prompts
from deepinfer.bench.environment import describe_environment
from deepinfer.bench.hf_baseline import (RANDOM_INIT_NOTE, GenerateTiming, HFModelInfo, hf_generate, hf_warmup,
                                         load_hf_model)
from deepinfer.bench.metrics import RequestTimes, StepSplit, Summary
from deepinfer.bench.report import BenchResult, Roofline, Workload, format_footer, format_step_split
from deepinfer.bench.roofline import format_rates, measure_device, throughput_bound
from deepinfer.bench.step_profile import StepProfile, StepProfiler
from deepinfer.bench.session import (ModelFacts, engine_kwargs_for, free_device_memory, open_engine,
                                     snapshot_timings)
from deepinfer.sampling_params import SamplingParams

HF_BATCH_SIZE = 128
"""transformers' default batch: large enough to be its best on a GPU, small enough for its cache."""
_WARMUP_PROMPTS = 8
_WARMUP_TOKENS = 16


@dataclass
class ThroughputMetrics:
    num_requests: int
    prompt_tokens: int
    output_tokens: int
    elapsed_s: float
    requests_per_s: float
    output_tok_s: float
    total_tok_s: float
    """(prompt + output tokens) / elapsed."""
    ttft_s: Summary
    tpot_s: Summary | None
    """Per request: (finished - first token) / (output tokens - 1); None when output_len is 1."""
    e2e_s: Summary
    num_preemptions: int
    """Requests that lost their KV cache for lack of room and were recomputed during the run."""


@dataclass
class ThroughputBaseline:
    engine: str
    model: HFModelInfo
    batch_size: int
    num_requests: int
    prompt_tokens: int
    output_tokens: int
    elapsed_s: float
    requests_per_s: float
    output_tok_s: float
    total_tok_s: float
    batch_ttft_s: Summary
    """Time to the first token of each generate() call (its batch's prefill)."""
    batches: list[GenerateTiming]


def measure_throughput(llm, prompts: list[list[int]], warmup: list[list[int]],
                       args: BenchArgs) -> tuple[ThroughputMetrics, StepSplit, StepProfile | None]:
    output_len = args.output_len
    llm.generate(warmup, SamplingParams(temperature=0, max_tokens=_WARMUP_TOKENS, ignore_eos=True), use_tqdm=False)
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    before, preempted = snapshot_timings(llm), llm.stats().num_preemptions
    profiler = StepProfiler(llm.engine, args.profile_skip_steps, args.profile_steps) if args.profile_steps else None
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=True)
    elapsed = time.perf_counter() - start
    profile = profiler.close() if profiler is not None else None
    split = StepSplit.between(before, snapshot_timings(llm), elapsed)
    times = [RequestTimes.of(o) for o in outputs]
    output_tokens = sum(t.output_tokens for t in times)
    if output_tokens != len(prompts) * output_len:
        raise RuntimeError(f"deepinfer generated {output_tokens} tokens, expected {len(prompts) * output_len}")
    prompt_tokens = sum(len(p) for p in prompts)
    tpots = [t.tpot for t in times if t.tpot is not None]
    metrics = ThroughputMetrics(
        num_requests=len(prompts), prompt_tokens=prompt_tokens, output_tokens=output_tokens, elapsed_s=elapsed,
        requests_per_s=len(prompts) / elapsed, output_tok_s=output_tokens / elapsed,
        total_tok_s=(prompt_tokens + output_tokens) / elapsed, ttft_s=Summary.of([t.ttft for t in times]),
        tpot_s=Summary.of(tpots) if tpots else None, e2e_s=Summary.of([t.e2e for t in times]),
        num_preemptions=llm.stats().num_preemptions - preempted)
    return metrics, split, profile


def hf_throughput(facts: ModelFacts, prompts: list[list[int]], args: BenchArgs) -> ThroughputBaseline:
    """transformers on the first hf_num_prompts prompts, in left-padded batches of hf_batch_size."""
    batch_size = args.hf_batch_size or HF_BATCH_SIZE
    subset = prompts[:args.hf_num_prompts or len(prompts)]
    batches = [subset[i:i + batch_size] for i in range(0, len(subset), batch_size)]
    model, info = load_hf_model(facts)
    try:
        hf_warmup(model, subset, facts.pad_token_id)
        timings = [hf_generate(model, b, args.output_len, facts.pad_token_id)
                   for b in tqdm(batches, desc="transformers batches", disable=not envs.DEEPINFER_TQDM)]
    finally:
        del model
        free_device_memory(facts.device)
    elapsed = sum(t.seconds for t in timings)
    prompt_tokens = sum(t.prompt_tokens for t in timings)
    output_tokens = sum(t.output_tokens for t in timings)
    return ThroughputBaseline(
        engine="transformers generate", model=info, batch_size=batch_size, num_requests=len(subset),
        prompt_tokens=prompt_tokens, output_tokens=output_tokens, elapsed_s=elapsed,
        requests_per_s=len(subset) / elapsed, output_tok_s=output_tokens / elapsed,
        total_tok_s=(prompt_tokens + output_tokens) / elapsed, batch_ttft_s=Summary.of([t.ttft_s for t in timings]),
        batches=timings)


def run_throughput(args: BenchArgs, engine_kwargs: dict[str, Any], command: str) -> BenchResult:
    warm = min(args.num_prompts, _WARMUP_PROMPTS)
    # Warm-up prompts come after the timed ones, so the prefix cache holds nothing the timed run uses.
    pool = load_prompts(args.dataset, args.num_prompts + warm, args.input_len, args.dataset_seed,
                        engine_kwargs.get("model"), engine_kwargs.get("tokenizer"))
    prompts, warmup = pool[:args.num_prompts], pool[args.num_prompts:]
    llm = open_engine(engine_kwargs_for(engine_kwargs, pool, args.output_len))
    metrics, split, profile = measure_throughput(llm, prompts, warmup, args)
    facts = ModelFacts.of(llm)
    del llm  # the baseline and the roofline's buffers need the device memory the KV cache holds
    left_gib = free_device_memory(facts.device)
    result = BenchResult(
        benchmark="throughput", command=command, args=dataclasses.asdict(args), engine_config=facts.engine_config,
        engine={**facts.resolved(), "device_memory_after_free_gib": left_gib}, environment=describe_environment(),
        workload=Workload.of(args.dataset, prompts, args.output_len, args.dataset_seed), metrics=metrics,
        step_split=split, profile=profile)
    if args.roofline:
        rates = measure_device(facts.device)
        lens = [len(p) for p in prompts]
        blocks_per_seq = -(-(max(lens) + args.output_len) // facts.block_size)
        max_batch = min(facts.engine_config["scheduler"]["max_num_seqs"], (facts.num_kv_blocks - 1) // blocks_per_seq)
        fp8 = facts.engine_config["model"]["quantization"] == "fp8"
        result.roofline = Roofline(rates, throughput_bound(facts.stats, rates, lens, args.output_len, max_batch,
                                                           metrics.output_tok_s, fp8=fp8))
    if args.compare_hf:
        result.baseline = hf_throughput(facts, prompts, args)
        result.speedup = {"output_tok_s": metrics.output_tok_s / result.baseline.output_tok_s}
        if result.baseline.num_requests < metrics.num_requests:
            result.notes.append(f"transformers was timed on the first {result.baseline.num_requests} of "
                                f"{metrics.num_requests} prompts (independent batches: its tok/s holds for all)")
        if result.baseline.model.source == "from_config":
            result.notes.append(RANDOM_INIT_NOTE)
    return result


def format_throughput(result: BenchResult) -> str:
    m: ThroughputMetrics = result.metrics
    w = result.workload
    lines = [f"throughput: {result.engine['model_path']} ({result.engine['dtype']}, {result.engine['device']}), "
             f"{m.num_requests} prompts x {w.prompt_len.mean:.0f} tokens in, {w.output_len} out",
             f"deepinfer: {m.elapsed_s:.2f} s, {m.requests_per_s:.2f} req/s, {m.output_tok_s:.1f} output tok/s, "
             f"{m.total_tok_s:.1f} total tok/s, {m.num_preemptions} preemptions",
             f"{'':>10} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10}  (ms)"]
    for name, s in (("TTFT", m.ttft_s), ("TPOT", m.tpot_s), ("E2E", m.e2e_s)):
        if s is None:
            continue
        lines.append(f"{name:>10} " + " ".join(f"{v * 1000:10.2f}" for v in (s.mean, s.p50, s.p90, s.p99)))
    lines.append(format_step_split(result.step_split))
    if result.baseline is not None:
        b = result.baseline
        lines.append(f"transformers generate ({b.num_requests} prompts, batch {b.batch_size}, {b.model.source}): "
                     f"{b.elapsed_s:.2f} s, {b.output_tok_s:.1f} output tok/s, {b.total_tok_s:.1f} total tok/s")
        lines.append(f"speedup: {result.speedup['output_tok_s']:.2f}x output tok/s")
    if result.roofline is not None:
        r, bound = result.roofline.device, result.roofline.bound
        lines.append(f"roofline: {format_rates(r)}; "
                     f"bound {bound.output_tok_s:.0f} output tok/s ({bound.total_tok_s:.0f} total; {bound.limited_by}: "
                     f"compute {bound.compute_seconds:.2f} s, memory {bound.memory_seconds:.2f} s at decode batch "
                     f"{bound.decode_batch}); "
                     f"deepinfer at {bound.percent_of_bound:.1f}%; sequential-kernel bound "
                     f"{bound.sequential_output_tok_s:.0f} output tok/s ({bound.sequential_seconds:.2f} s), deepinfer at "
                     f"{bound.percent_of_sequential_bound:.1f}%")
    return "\n".join(lines + format_footer(result))
