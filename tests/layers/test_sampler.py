"""The sampler's truncations, penalties and draw."""

from __future__ import annotations

import torch

from deepinfer.layers.sampler import RowPenalties, Sampler, SamplingBatch
from deepinfer.worker.model_runner import row_seed


def batch(rows, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seeds=None, penalties=None, suppressed=None,
          num_logprobs=None):
    return SamplingBatch(
        seeds=seeds if seeds is not None else [row_seed(1, i) for i in range(rows)],
        penalties=penalties or {},
        suppressed=suppressed or {},
        num_logprobs=num_logprobs,
        temperature=torch.full((rows,), float(temperature)),
        top_k=torch.full((rows,), top_k, dtype=torch.long),
        top_p=torch.full((rows,), float(top_p)),
        min_p=torch.full((rows,), float(min_p)),
        max_top_k=top_k,
        uses_top_p=top_p < 1,
        uses_min_p=min_p > 0,
    )


def draws(logits, n=4000, **kw):
    sampler = Sampler()
    rows = logits.expand(n, -1).clone()
    return sampler(rows, batch(n, seeds=[row_seed(11, i) for i in range(n)], **kw)).sampled


def test_draw_follows_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    counts = torch.bincount(draws(probs.log()[None]), minlength=4).float() / 4000
    assert torch.allclose(counts, probs, atol=0.03)


def test_top_k_without_sorting_equals_the_sorting_path():
    from deepinfer.layers.sampler import _top_k_only, _top_k_top_p

    logits = torch.randn(6, 500)
    top_k = torch.tensor([0, 1, 7, 50, 499, 500])
    no_p = torch.ones(6)
    assert torch.equal(_top_k_only(logits, top_k, 500), _top_k_top_p(logits, top_k, no_p))
    assert torch.equal(_top_k_only(logits[2:4], top_k[2:4], 50), _top_k_top_p(logits[2:4], top_k[2:4], no_p[:2]))


def test_top_k_top_p_min_p_truncate():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert set(draws(logits, top_k=2).tolist()) == {0, 1}
    assert set(draws(logits, top_p=0.7).tolist()) == {0, 1}  # 0.5 < 0.7, 0.5+0.3 >= 0.7
    assert set(draws(logits, top_p=0.5).tolist()) == {0}
    assert set(draws(logits, min_p=0.25).tolist()) == {0, 1, 2}  # 0.05 < 0.25 * 0.5


def test_low_temperature_is_nearly_greedy_and_zero_is_greedy():
    logits = torch.tensor([[1.0, 1.2, 0.9]])
    assert set(draws(logits, temperature=0.01).tolist()) == {1}
    sampler = Sampler()
    out = sampler(logits.clone(), batch(1, temperature=0.0, seeds=[None]))
    assert out.sampled.tolist() == [1]


def test_penalties_and_suppression():
    sampler = Sampler()
    logits = torch.tensor([[2.0, 1.9, -1.0, 0.0]])
    rep = RowPenalties(torch.tensor([0]), torch.tensor([], dtype=torch.long), 0.0, 0.0, 2.0)
    assert sampler(logits.clone(), batch(1, temperature=0, seeds=[None], penalties={0: rep})).sampled.item() == 1
    freq = RowPenalties(torch.tensor([3]), torch.tensor([0, 0]), 0.0, 0.1, 1.0)
    assert sampler(logits.clone(), batch(1, temperature=0, seeds=[None], penalties={0: freq})).sampled.item() == 1
    assert sampler(logits.clone(), batch(1, temperature=0, seeds=[None], suppressed={0: [0, 1]})).sampled.item() == 3


def test_same_seed_same_draw_regardless_of_row():
    sampler = Sampler()
    logits = torch.randn(5, 50)
    seeds = [row_seed(3, 0), row_seed(4, 0), row_seed(5, 0), row_seed(6, 0), row_seed(7, 0)]
    full = sampler(logits.clone(), batch(5, seeds=seeds)).sampled
    alone = sampler(logits[2:3].clone(), batch(1, seeds=seeds[2:3])).sampled
    assert full[2] == alone[0]


def test_logprobs_are_of_the_raw_distribution():
    sampler = Sampler()
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    out = sampler(logits.clone(), batch(1, temperature=0.5, top_k=1, num_logprobs=2))
    expected = logits.log_softmax(-1)
    assert torch.allclose(out.top_logprobs, expected[:, :2])
    assert out.top_token_ids.tolist() == [[0, 1]]
    assert out.sampled_rank.tolist() == [1]


# ---- the draw follows the exact filtered distribution (total variation over 50,000 draws) -----
VOCAB_LOGITS = torch.tensor([[2.0, 1.5, 1.2, 1.0, 0.7, 0.3, 0.0, -0.5, -1.0, -2.0]])


def _tv(samples: torch.Tensor, target: torch.Tensor) -> float:
    freq = torch.bincount(samples, minlength=target.numel()).float() / samples.numel()
    return 0.5 * (freq - target).abs().sum().item()


def _filtered(keep: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    p = (VOCAB_LOGITS[0] / temperature).softmax(-1) * keep
    return p / p.sum()


def test_top_k_draws_match_the_renormalized_top_k():
    probs = VOCAB_LOGITS[0].softmax(-1)
    keep = torch.zeros(10)
    keep[probs.topk(4).indices] = 1
    got = draws(VOCAB_LOGITS, n=50_000, top_k=4, temperature=0.8)
    assert set(got.tolist()) <= set(probs.topk(4).indices.tolist())
    assert _tv(got, _filtered(keep, 0.8)) < 0.02


def test_top_p_draws_match_the_nucleus():
    p = VOCAB_LOGITS[0].softmax(-1)  # sorted descending already
    mass_before = p.cumsum(0) - p
    keep = (mass_before < 0.75).float()  # the smallest prefix whose mass reaches 0.75
    got = draws(VOCAB_LOGITS, n=50_000, top_p=0.75)
    assert _tv(got, _filtered(keep)) < 0.02
    assert keep.sum() < 10 and set(got.tolist()) == set(torch.nonzero(keep).flatten().tolist())


def test_min_p_draws_match_the_thresholded_distribution():
    p = VOCAB_LOGITS[0].softmax(-1)
    keep = (p >= 0.1 * p.max()).float()
    got = draws(VOCAB_LOGITS, n=50_000, min_p=0.1)
    assert _tv(got, _filtered(keep)) < 0.02
    assert set(got.tolist()) == set(torch.nonzero(keep).flatten().tolist())


def test_unfiltered_draws_match_softmax_and_a_wrong_target_is_caught():
    got = draws(VOCAB_LOGITS, n=50_000)
    assert _tv(got, VOCAB_LOGITS[0].softmax(-1)) < 0.02
    assert _tv(got, (VOCAB_LOGITS[0] * 1.3).softmax(-1)) > 0.02, "the test can tell a slightly different distribution"
