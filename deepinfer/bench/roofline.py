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
    fp8, note = measure_fp8_matmul(device, n if device.type == "cuda" else 1024, repeats)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return DeviceRates(device=str(device), copy_bytes=copy_bytes, copy_bandwidth_gb_s=bandwidth, matmul_size=n,
                       bf16_matmul_tflop_s=bf16, fp8_matmul_tflop_s=fp8, fp8_note=note)


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
class ComputeBound:
    """Compute bound of a whole offline run: its FLOPs at the measured bf16 matmul rate."""

    flops: float
    linear_flops: float
    """2 x matmul params x every token the forward passes see."""
    lm_head_flops: float
    """2 x LM-head params x output tokens (only sampled positions go through the head)."""
    attention_flops: float
    """q.k and p.v over each token's causal context."""
    min_seconds: float
    output_tok_s: float
    total_tok_s: float
    measured_output_tok_s: float
    percent_of_bound: float


def compute_bound(stats: ModelStats, rates: DeviceRates, prompt_lens: list[int], output_len: int,
                  measured_output_tok_s: float) -> ComputeBound:
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
    seconds = flops / (rates.bf16_matmul_tflop_s * 1e12)
    bound = output_tokens / seconds
    return ComputeBound(flops=flops, linear_flops=linear, lm_head_flops=head, attention_flops=attention,
                        min_seconds=seconds, output_tok_s=bound, total_tok_s=(prompt_tokens + output_tokens) / seconds,
                        measured_output_tok_s=measured_output_tok_s,
                        percent_of_bound=100 * measured_output_tok_s / bound)
