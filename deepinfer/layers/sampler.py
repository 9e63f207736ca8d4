"""The sampler: logits -> next token ids (and log-probabilities), one row per request.

Order of operations: penalties on the raw logits, then min_tokens suppression, then
temperature, top_k, top_p and min_p, then a draw. Greedy rows take the argmax of the penalized
logits. Random rows draw with the "exponential race" (``ops.exponential_race``: argmax of p / E
with E ~ Exp(1), which samples exactly from p), its noise a pure function of the row's key (the
request's seed and the token's position): a seeded request gives the same tokens whatever batch
it is in.

Every step is a batched tensor operation whose shape and branches are decided from host-side
facts (which rows are greedy, which use top-k, ...), so sampling never waits for the device:
its only host sync is the engine reading the sampled ids a step later.

Log-probabilities are those of the model's raw distribution (before penalties, temperature
and truncation), like vLLM's default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from deepinfer import ops
from deepinfer.transfer import to_device


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
    """Per row: the key of this row's noise (see ``row_seed``), None for greedy rows."""
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
    max_top_k: int | None = None
    """Host-side: the largest top_k of any row, 0 when no row uses top-k; None: unknown (read
    from ``top_k``, a device sync)."""
    uses_top_p: bool = True
    """Host-side: some row has top_p < 1 (only then is the vocabulary sorted)."""
    uses_min_p: bool = True
    """Host-side: some row has min_p > 0."""

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
    """Stateless: a row's noise comes from its key, not from a generator."""

    def __call__(self, logits: torch.Tensor, batch: SamplingBatch) -> SamplerOutput:
        raw_logprobs = logits.log_softmax(-1) if batch.num_logprobs is not None else None
        logits = self._apply_penalties(logits, batch)
        if batch.suppressed:
            rows = [r for r, ids in batch.suppressed.items() for _ in ids]
            ids = [t for ids in batch.suppressed.values() for t in ids]
            logits = logits.index_put((to_device(rows, logits.device, torch.long),
                                       to_device(ids, logits.device, torch.long)),
                                      torch.full((), float("-inf"), device=logits.device))
        sampled = logits.argmax(-1)
        if not batch.all_greedy:
            random_rows = [i for i, seed in enumerate(batch.seeds) if seed is not None]
            keys = to_device([batch.seeds[i] for i in random_rows], logits.device, torch.long)
            if len(random_rows) == len(batch.seeds):
                sampled = self._draw(logits, batch, keys)
            else:
                index = to_device(random_rows, logits.device, torch.long)
                sampled = sampled.index_copy(0, index, self._draw(logits, batch, keys, index))
        out = SamplerOutput(sampled)
        if raw_logprobs is not None:
            n = batch.num_logprobs
            out.top_logprobs, out.top_token_ids = raw_logprobs.topk(n, dim=-1) if n else (None, None)
            out.sampled_logprob = raw_logprobs.gather(1, sampled[:, None]).squeeze(1)
            out.sampled_rank = (raw_logprobs > out.sampled_logprob[:, None]).sum(-1) + 1
        return out

    @staticmethod
    def _apply_penalties(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        """All penalized rows at once: token counts by scatter-add over padded id lists."""
        if not batch.penalties:
            return logits
        dev, vocab = logits.device, logits.shape[-1]
        rows = list(batch.penalties)
        pens = list(batch.penalties.values())
        index = to_device(rows, dev, torch.long)
        pad = vocab  # an extra column that the padding counts into, then dropped

        def table(seqs: list[torch.Tensor]) -> torch.Tensor:
            ids = pad_sequence([t.to(dev, torch.long) for t in seqs], batch_first=True, padding_value=pad)
            counts = torch.zeros(len(seqs), vocab + 1, dtype=logits.dtype, device=dev)
            return counts.scatter_add_(1, ids, torch.ones_like(ids, dtype=logits.dtype))[:, :vocab]

        out_counts = table([p.output_token_ids for p in pens])
        seen = (table([p.prompt_token_ids for p in pens]) + out_counts) > 0
        rep, presence, frequency = (to_device([float(getattr(p, f)) for p in pens], dev, logits.dtype)[:, None]
                                    for f in ("repetition", "presence", "frequency"))
        vals = logits.index_select(0, index)
        vals = torch.where(seen & (rep != 1.0), torch.where(vals > 0, vals / rep, vals * rep), vals)
        vals = vals - (frequency * out_counts + presence * (out_counts > 0).to(logits.dtype))
        return logits.index_copy(0, index, vals)

    @staticmethod
    def _draw(logits: torch.Tensor, batch: SamplingBatch, keys: torch.Tensor,
              index: torch.Tensor | None = None) -> torch.Tensor:
        """Draws for the random rows (``index``, or all rows)."""
        pick = (lambda t: t) if index is None else (lambda t: t.index_select(0, index))
        logits, temperature = pick(logits), pick(batch.temperature)
        logits = logits / torch.where(temperature > 0, temperature, 1.0)[:, None]
        max_top_k = int(batch.top_k.max()) if batch.max_top_k is None else batch.max_top_k
        if batch.uses_top_p:
            logits = _top_k_top_p(logits, pick(batch.top_k), pick(batch.top_p))
        elif max_top_k > 0:
            logits = _top_k_only(logits, pick(batch.top_k), min(max_top_k, logits.shape[-1]))
        probs = logits.softmax(-1)
        if batch.uses_min_p:
            threshold = pick(batch.min_p)[:, None] * probs.amax(-1, keepdim=True)
            probs = probs.masked_fill(probs < threshold, 0.0)
        return ops.exponential_race(probs, keys)


def _top_k_only(logits: torch.Tensor, top_k: torch.Tensor, max_top_k: int) -> torch.Tensor:
    """Top-k without sorting the vocabulary: the k-th largest logit of each row (one partial
    top-``max_top_k`` selection for the batch) is its threshold; rows with top_k 0 keep all.
    Differs from the sorting path only on exact ties at the k-th value, which it keeps."""
    kth = logits.topk(max_top_k, dim=-1).values
    k = top_k.clamp(min=1, max=max_top_k)[:, None]
    threshold = torch.where(top_k[:, None] > 0, kth.gather(1, k - 1), float("-inf"))
    return logits.masked_fill(logits < threshold, float("-inf"))


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
