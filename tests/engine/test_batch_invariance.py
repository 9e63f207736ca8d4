"""Batch-invariant mode: a request's logits are bitwise the same alone and inside batches of
other sizes and orders (and so are its tokens), here on CPU; off, they are not."""

from __future__ import annotations

import random

import pytest
import torch

from deepinfer import LLM, SamplingParams

PROMPTS = ["Hello world!", "The quick brown fox jumps over the lazy dog", "def main():", "1 2 3",
           "Once upon a time, in a land far away, there lived", "x"]


def _logprob_bits(outputs):
    """Per request: tokens and every top-20 logprob at every position, as exact float32 bits."""
    out = []
    for o in outputs:
        c = o.outputs[0]
        out.append((c.token_ids, [sorted((t, torch.tensor(lp.logprob, dtype=torch.float32).view(torch.int32).item())
                                         for t, lp in d.items()) for d in c.logprobs]))
    return out


def _runs(llm):
    """Each prompt alone, then all together in three orders, with 0-2 fillers of other lengths."""
    params = SamplingParams(temperature=0, max_tokens=10, logprobs=20)
    alone = [_logprob_bits(llm.generate([p], params, use_tqdm=False))[0] for p in PROMPTS]
    rng = random.Random(0)
    batched = []
    for trial in range(3):
        order = list(range(len(PROMPTS)))
        rng.shuffle(order)
        fillers = ["filler " * rng.randint(1, 12) for _ in range(trial)]
        outs = _logprob_bits(llm.generate([PROMPTS[i] for i in order] + fillers, params, use_tqdm=False))
        batched.append({i: outs[pos] for pos, i in enumerate(order)})
    return alone, batched


@pytest.fixture(scope="module")
def invariant_llm(tiny_llama):
    # A small step budget, so prompts are chunked differently alone and together.
    return LLM(tiny_llama, max_model_len=96, batch_invariant=True, max_num_batched_tokens=12)


def test_logits_are_bitwise_the_same_alone_and_in_any_batch(invariant_llm):
    alone, batched = _runs(invariant_llm)
    for run in batched:
        for i, expected in enumerate(alone):
            assert run[i] == expected, f"prompt {i} changed with its batch"


def test_without_the_mode_some_logits_change(tiny_llama):
    """The control: the same runs without batch-invariant mode do differ in some bit (so the test
    above can fail)."""
    alone, batched = _runs(LLM(tiny_llama, max_model_len=96, max_num_batched_tokens=12))
    assert any(run[i] != expected for run in batched for i, expected in enumerate(alone))


def test_invariant_mode_matches_the_normal_mode_closely(invariant_llm, tiny_llama):
    normal = LLM(tiny_llama, max_model_len=96)
    params = SamplingParams(temperature=0, max_tokens=10, logprobs=1)
    a = invariant_llm.generate(PROMPTS, params, use_tqdm=False)
    b = normal.generate(PROMPTS, params, use_tqdm=False)
    for x, y in zip(a, b):
        for dx, dy in zip(x.outputs[0].logprobs, y.outputs[0].logprobs):
            for t in set(dx) & set(dy):
                assert abs(dx[t].logprob - dy[t].logprob) < 1e-4


def test_quantization_is_refused_in_batch_invariant_mode(tiny_llama):
    with pytest.raises(ValueError, match="batch_invariant"):
        LLM(tiny_llama, max_model_len=64, batch_invariant=True, quantization="fp8")
