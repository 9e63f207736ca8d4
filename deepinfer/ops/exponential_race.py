"""Seeded sampling by the exponential race: ``argmax_v probs[b, v] / E[b, v]`` with E ~ Exp(1)
drawn independently per element, picks token v with probability probs[b, v] exactly.

The noise is counter-based: E[b, v] is a pure function of the row's 64-bit key (from the
request's seed and the token's position) and of v, through the splitmix64 finalizer. So a row's
draw depends on nothing else in the batch (not its size, order or other rows), on no generator
state, and is the same on every device and backend.
"""

from __future__ import annotations

import torch

from deepinfer.ops.dispatch import get_op

GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
UNIFORM_BITS = 24
"""Uniforms are (i + 0.5) / 2**24 for 24-bit i: exact in float32 and never 0 or 1, so E is finite
and positive."""


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> on int64 is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def race_noise_ref(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """E [B, vocab] float32 for int64 ``keys`` [B]."""
    v = torch.arange(1, vocab + 1, dtype=torch.int64, device=keys.device)
    z = keys[:, None] + v[None, :] * _signed(GOLDEN)  # int64 arithmetic wraps mod 2**64
    z = (z ^ _shr(z, 30)) * _signed(MIX1)
    z = (z ^ _shr(z, 27)) * _signed(MIX2)
    z = z ^ _shr(z, 31)
    u = (_shr(z, 64 - UNIFORM_BITS).to(torch.float32) + 0.5) * (1.0 / (1 << UNIFORM_BITS))
    return -torch.log(u)


def exponential_race_ref(probs: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return (probs / race_noise_ref(keys, probs.shape[-1])).argmax(-1)


def exponential_race(probs: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """probs [B, V] float32 (rows need not be normalized; zeros are never drawn unless a row is all
    zero), keys [B] int64 -> the drawn token of each row [B] int64."""
    return get_op("exponential_race", probs.device.type)(probs, keys)
