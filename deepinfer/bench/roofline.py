"""What the device can do (copy bandwidth, matmul rate), measured here, and the bounds that follow.

Measured rather than taken from a data sheet: the bound should be what this device, driver and
torch build actually reach. Each figure is the best of several timed runs after a warm-up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from deepinfer.bench.model_stats import ModelStats

_GIB = 1 << 30


@dataclass
class DeviceRates:
    device: str
    copy_bytes: int
    """Size of the buffer copied (bytes); the traffic is twice that (read + write)."""
    copy_bandwidth_gb_s: float
    """Device-to-device copy, (read + write bytes) / time, in GB/s (1e9 bytes)."""
    matmul_size: int
    bf16_matmul_tflop_s: float
    fp8_matmul_tflop_s: float | None
    """``torch._scaled_mm`` with e4m3 inputs and bf16 output; None where it does not run."""
    fp8_note: str


def _best_seconds(fn: Callable[[], None], device: torch.device, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            # Events time the device's own work, without the host's launch overhead around it.
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1000)
        else:
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    return best


def measure_copy_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), device, repeats)
    return 2 * nbytes / seconds / 1e9


def measure_matmul(device: torch.device, n: int, repeats: int) -> float:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    inner = 4 if device.type == "cuda" else 1  # several per timing: one 8192^3 matmul is ~1 ms on a GPU

    def run() -> None:
        for _ in range(inner):
            torch.mm(a, b)

    return 2 * n**3 * inner / _best_seconds(run, device, repeats) / 1e12


def measure_fp8_matmul(device: torch.device, n: int, repeats: int) -> tuple[float | None, str]:
    """TFLOP/s of ``torch._scaled_mm`` (e4m3 x e4m3 -> bf16, per-tensor scales), or None and why not."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return None, "this torch has no float8_e4m3fn / _scaled_mm"
    try:
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        # _scaled_mm wants the second operand column-major: the transpose of a row-major matrix.
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=device)
        inner = 4 if device.type == "cuda" else 1

        def run() -> None:
            for _ in range(inner):
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)

        rate = 2 * n**3 * inner / _best_seconds(run, device, repeats) / 1e12
        return rate, "torch._scaled_mm e4m3, per-tensor scales, bf16 out, fast accumulation"
    except (RuntimeError, TypeError, NotImplementedError) as exc:  # no fp8 kernels for this device
        return None, f"not supported here: {str(exc).splitlines()[0][:200]}"


def measure_device(device: torch.device) -> DeviceRates:
    """Copy bandwidth and matmul rates of ``device``; GPU sizes are those that reach the peak
    (1 GiB copy, 8192^3 matmul); CPU sizes are smaller so that a measurement takes a second."""
    if device.type == "cuda":
        copy_bytes, n, repeats = _GIB, 8192, 10
    else:
        copy_bytes, n, repeats = 256 << 20, 2048, 3
    bandwidth = measure_copy_bandwidth(device, copy_bytes, repeats)
    bf16 = measure_matmul(device, n, repeats)
    if device.type == "cuda":
        fp8, note = measure_fp8_matmul(device, n, repeats)
    else:  # torch's CPU fp8 matmul is a slow reference path (1e-4 TFLOP/s), nothing to bound against
        fp8, note = None, "not measured on CPU"
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return DeviceRates(device=str(device), copy_bytes=copy_bytes, copy_bandwidth_gb_s=bandwidth, matmul_size=n,
                       bf16_matmul_tflop_s=bf16, fp8_matmul_tflop_s=fp8, fp8_note=note)


def format_rates(rates: DeviceRates) -> str:
    fp8 = "n/a" if rates.fp8_matmul_tflop_s is None else f"{rates.fp8_matmul_tflop_s:.1f} TFLOP/s"
    return (f"copy {rates.copy_bandwidth_gb_s:.0f} GB/s, bf16 matmul {rates.bf16_matmul_tflop_s:.1f} TFLOP/s, "
            f"fp8 matmul {fp8}")


@dataclass
class DecodeBound:
    """Memory-bandwidth bound of decoding: a step reads every weight once plus each sequence's KV."""

    batch_size: int
    mean_context: float
    bytes_per_step: float
    tok_s_per_seq: float
    """Bound on one sequence's decode tok/s: bandwidth / bytes per step."""
    measured_tok_s_per_seq: float
    percent_of_bound: float


def decode_bound(stats: ModelStats, rates: DeviceRates, batch_size: int, input_len: float, output_len: int,
                 measured_tok_s_per_seq: float) -> DecodeBound:
    # Decode steps run at contexts input_len .. input_len + output_len - 1: their mean.
    context = input_len + (output_len - 1) / 2
    step_bytes = stats.decode_step_bytes(batch_size, context)
    bound = rates.copy_bandwidth_gb_s * 1e9 / step_bytes
    return DecodeBound(batch_size=batch_size, mean_context=context, bytes_per_step=step_bytes, tok_s_per_seq=bound,
                       measured_tok_s_per_seq=measured_tok_s_per_seq,
                       percent_of_bound=100 * measured_tok_s_per_seq / bound)


@dataclass
class ThroughputBound:
    """Bound of a whole offline run: it ends no sooner than its FLOPs take at the measured bf16
    matmul rate (compute), nor than the bytes its decode steps read take at the measured copy
    bandwidth (memory). Each is a lower bound on the time, so their max is one too."""

    flops: float
    linear_flops: float
    """2 x matmul params x every token the forward passes see."""
    lm_head_flops: float
    """2 x LM-head params x output tokens (only sampled positions go through the head)."""
    attention_flops: float
    """q.k and p.v over each token's causal context."""
    compute_seconds: float
    decode_batch: int
    """Most sequences one decode step can hold: max_num_seqs, the prompts, or what the KV cache fits."""
    decode_steps: int
    """Fewest decode steps: every output token after the first, decode_batch of them per step."""
    memory_bytes: float
    """All weights once per decode step, plus every decode token's read of its KV cache."""
    memory_seconds: float
    min_seconds: float
    limited_by: str
    """compute or memory: which of the two is the bound."""
    output_tok_s: float
    total_tok_s: float
    measured_output_tok_s: float
    percent_of_bound: float
    matmul_tflop_s: float
    """The rate the linear layers' FLOPs were counted at (the fp8 rate for an fp8 model)."""
    sequential_seconds: float
    """The bound for an engine whose attention and matmul kernels run one after another (as
    deepinfer's, vLLM's and SGLang's do within a layer): matmuls take the longer of their FLOPs
    and their weight reads, then decode attention reads the KV cache, then prefill attention's
    FLOPs. The max() bound above also allows overlapping them, which no kernel here does."""
    sequential_output_tok_s: float
    percent_of_sequential_bound: float


def throughput_bound(stats: ModelStats, rates: DeviceRates, prompt_lens: list[int], output_len: int,
                     max_batch: int, measured_output_tok_s: float, fp8: bool = False) -> ThroughputBound:
    prompt_tokens = sum(prompt_lens)
    output_tokens = len(prompt_lens) * output_len
    # The forward passes see every prompt token and every output token but the last (it is
    # sampled, never fed back); the LM head runs once per output token.
    fed = prompt_tokens + output_tokens - len(prompt_lens)
    linear = 2.0 * stats.matmul_params * fed
    head = 2.0 * stats.lm_head_params * output_tokens
    # A token at position t attends to t + 1 keys: sum over the fed positions of each sequence.
    positions = sum((n + output_len - 1) * (n + output_len) / 2 for n in prompt_lens)
    attention = stats.attention_flops(1.0) * positions
    flops = linear + head + attention
    bf16_rate = rates.bf16_matmul_tflop_s * 1e12
    matmul_rate = (rates.fp8_matmul_tflop_s or rates.bf16_matmul_tflop_s) * 1e12 if fp8 else bf16_rate
    compute_s = linear / matmul_rate + (head + attention) / bf16_rate

    batch = max(1, min(max_batch, len(prompt_lens)))
    decode_tokens = len(prompt_lens) * (output_len - 1)
    steps = -(-decode_tokens // batch)
    # Decode tokens sit at positions n .. n + output_len - 2 and read n + 1 .. n + output_len - 1 keys.
    keys_read = sum((n + output_len - 1) * (n + output_len) / 2 - n * (n + 1) / 2 for n in prompt_lens)
    memory_bytes = steps * stats.weight_bytes_per_token + keys_read * stats.kv_bytes_per_token
    memory_s = memory_bytes / (rates.copy_bandwidth_gb_s * 1e9)

    seconds = max(compute_s, memory_s)
    bound = output_tokens / seconds
    bandwidth = rates.copy_bandwidth_gb_s * 1e9
    matmul_s = max(linear / matmul_rate + head / bf16_rate, steps * stats.weight_bytes_per_token / bandwidth)
    sequential_s = matmul_s + keys_read * stats.kv_bytes_per_token / bandwidth + attention / bf16_rate
    sequential_bound = output_tokens / sequential_s
    return ThroughputBound(flops=flops, linear_flops=linear, lm_head_flops=head, attention_flops=attention,
                           compute_seconds=compute_s, decode_batch=batch, decode_steps=steps,
                           memory_bytes=memory_bytes, memory_seconds=memory_s, min_seconds=seconds,
                           limited_by="compute" if compute_s >= memory_s else "memory", output_tok_s=bound,
                           total_tok_s=(prompt_tokens + output_tokens) / seconds,
                           measured_output_tok_s=measured_output_tok_s,
                           percent_of_bound=100 * measured_output_tok_s / bound,
                           matmul_tflop_s=matmul_rate / 1e12, sequential_seconds=sequential_s,
                           sequential_output_tok_s=sequential_bound,
                           percent_of_sequential_bound=100 * measured_output_tok_s / sequential_bound)
