"""The sampler: logits -> next token ids (and log-probabilities), one row per request.

Order of operations: penalties on the raw logits, then min_tokens suppression, then
temperature, top_k, top_p and min_p, then a draw. Greedy rows take the argmax of the penalized
logits. Random rows draw with the "exponential race" (argmax of p / E with E ~ Exp(1)), which
samples exactly from p; each row's noise comes from a generator seeded by that request's seed
and the token's position, so a seeded request gives the same tokens whatever batch it is in.

Log-probabilities are those of the model's raw distribution (before penalties, temperature
and truncation), like vLLM's default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowPenalties:
    """Inputs of the penalties of one row (only rows that use a penalty carry one)."""

    prompt_token_ids: torch.Tensor
    output_token_ids: torch.Tensor
    presence: float
    frequency: float
    repetition: float


@dataclass
class SamplingBatch:
    """Per-row sampling parameters of one step, already on the logits' device."""

    seeds: list[int | None]
    """Per row: the seed of this row's noise (see ``row_seed``), None for greedy rows."""
    penalties: dict[int, RowPenalties]
    suppressed: dict[int, list[int]]
    """Row -> token ids that may not be sampled yet (EOS / stop tokens before min_tokens)."""
    num_logprobs: int | None
    """Top-N log-probabilities to return, None when no row asked for them."""
    temperature: torch.Tensor | None = None
    """[B] float; 0 for greedy rows. The four truncation tensors are None when every row is greedy."""
    top_k: torch.Tensor | None = None
    """[B] long; 0 = off."""
    top_p: torch.Tensor | None = None
    min_p: torch.Tensor | None = None

    @property
    def all_greedy(self) -> bool:
        return all(seed is None for seed in self.seeds)


@dataclass
class SamplerOutput:
    sampled: torch.Tensor
    """[B] long."""
    top_logprobs: torch.Tensor | None = None
    """[B, N] float: the N largest log-probabilities."""
    top_token_ids: torch.Tensor | None = None
    sampled_logprob: torch.Tensor | None = None
    """[B] float."""
    sampled_rank: torch.Tensor | None = None
    """[B] long, 1 = most likely."""


class Sampler:
    def __init__(self, device: torch.device | str) -> None:
        # One generator, re-seeded per row: each row's noise depends only on its own seed.
        self.generator = torch.Generator(device=device)

    def __call__(self, logits: torch.Tensor, batch: SamplingBatch) -> SamplerOutput:
        raw_logprobs = logits.log_softmax(-1) if batch.num_logprobs is not None else None
        logits = self._apply_penalties(logits, batch)
        for row, token_ids in batch.suppressed.items():
            logits[row, token_ids] = float("-inf")
        sampled = logits.argmax(-1)
        if not batch.all_greedy:
            random_rows = torch.tensor([seed is not None for seed in batch.seeds], device=logits.device)
            drawn = self._draw(logits, batch)
            sampled = torch.where(random_rows, drawn, sampled)
        out = SamplerOutput(sampled)
        if raw_logprobs is not None:
            n = batch.num_logprobs
            out.top_logprobs, out.top_token_ids = raw_logprobs.topk(n, dim=-1) if n else (None, None)
            out.sampled_logprob = raw_logprobs.gather(1, sampled[:, None]).squeeze(1)
            out.sampled_rank = (raw_logprobs > out.sampled_logprob[:, None]).sum(-1) + 1
        return out

    @staticmethod
    def _apply_penalties(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        if not batch.penalties:
            return logits
        logits = logits.clone()
        vocab = logits.shape[-1]
        for row, p in batch.penalties.items():
            if p.repetition != 1.0:
                seen = torch.cat((p.prompt_token_ids, p.output_token_ids)).unique()
                vals = logits[row, seen]
                logits[row, seen] = torch.where(vals > 0, vals / p.repetition, vals * p.repetition)
            if p.presence or p.frequency:
                counts = torch.bincount(p.output_token_ids, minlength=vocab).to(logits.dtype)
                logits[row] -= p.frequency * counts + p.presence * (counts > 0).to(logits.dtype)
        return logits

    def _draw(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        temperature = torch.where(batch.temperature > 0, batch.temperature, 1.0)
        logits = logits / temperature[:, None]
        if bool((batch.top_k > 0).any()) or bool((batch.top_p < 1).any()):
            logits = _top_k_top_p(logits, batch.top_k, batch.top_p)
        probs = logits.softmax(-1)
        if bool((batch.min_p > 0).any()):
            threshold = batch.min_p[:, None] * probs.amax(-1, keepdim=True)
            probs = probs.masked_fill(probs < threshold, 0.0)
        noise = torch.empty_like(probs)
        for row, seed in enumerate(batch.seeds):
            if seed is None:
                noise[row] = 1.0
            else:
                self.generator.manual_seed(seed)
                noise[row].exponential_(generator=self.generator)
        return (probs / noise).argmax(-1)


def _top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask everything outside each row's top_k and top_p nucleus with -inf."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    ranks = torch.arange(vocab, device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, vocab)[:, None]
    sorted_logits = sorted_logits.masked_fill(ranks >= k, float("-inf"))
    probs = sorted_logits.softmax(-1)
    # Drop a token when the tokens ranked above it already reach top_p; the first always stays.
    mass_before = probs.cumsum(-1) - probs
    sorted_logits = sorted_logits.masked_fill(mass_before >= top_p[:, None], float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
