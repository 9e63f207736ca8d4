"""Triton exponential race: one program per row streams its probabilities once, generating the
counter-based noise in registers (no [B, V] noise tensor) and keeping a running argmax; ties go
to the lowest index, like torch.argmax."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.ops.exponential_race import GOLDEN, MIX1, MIX2, UNIFORM_BITS


@triton.jit
def _race_kernel(probs_ptr, keys_ptr, out_ptr, vocab, stride, GOLDEN: tl.constexpr, MIX1: tl.constexpr,
                 MIX2: tl.constexpr, UNIFORM_BITS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    key = tl.load(keys_ptr + row).to(tl.uint64)
    best = tl.full([BLOCK], -1.0, tl.float32)
    best_idx = tl.zeros([BLOCK], tl.int64)
    for start in range(0, vocab, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = cols < vocab
        p = tl.load(probs_ptr + row * stride + cols, mask=ok, other=0.0).to(tl.float32)
        z = key + (cols + 1).to(tl.uint64) * GOLDEN
        z = (z ^ (z >> 30)) * MIX1
        z = (z ^ (z >> 27)) * MIX2
        z = z ^ (z >> 31)
        u = ((z >> (64 - UNIFORM_BITS)).to(tl.float32) + 0.5) * (1.0 / (1 << UNIFORM_BITS))
        score = tl.where(ok, p / -tl.log(u), -1.0)
        better = score > best  # strictly: an earlier block keeps a tie
        best = tl.where(better, score, best)
        best_idx = tl.where(better, cols.to(tl.int64), best_idx)
    top = tl.max(best, 0)
    idx = tl.min(tl.where(best == top, best_idx, vocab), 0)
    tl.store(out_ptr + row, idx)


def exponential_race(probs: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    batch, vocab = probs.shape
    out = torch.empty(batch, dtype=torch.int64, device=probs.device)
    if batch:
        if probs.stride(-1) != 1:
            probs = probs.contiguous()
        _race_kernel[(batch,)](probs, keys.contiguous(), out, vocab, probs.stride(0), GOLDEN=GOLDEN, MIX1=MIX1,
                               MIX2=MIX2, UNIFORM_BITS=UNIFORM_BITS, BLOCK=min(4096, triton.next_power_of_2(vocab)),
                               num_warps=8)
    return out
