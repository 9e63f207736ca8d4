"""Seeded sampling does not depend on the batch: a request's noise is keyed on its seed and the
token's position only (counter-based), so it draws the same tokens alone and among others."""

from __future__ import annotations

import random

from deepinfer import LLM, SamplingParams

PROMPT = "Once upon a time"


def test_seeded_request_alone_and_inside_a_batch_of_32(tiny_llama):
    llm = LLM(tiny_llama, max_model_len=64)
    target = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, max_tokens=24, seed=1234)
    alone = llm.generate([PROMPT], target, use_tqdm=False)[0].outputs[0].token_ids
    rng = random.Random(0)
    others = [" ".join(rng.choice(["red", "fox", "blue", "sky", "runs", "def", "x = 1"]) for _ in range(rng.randint(1, 8)))
              for _ in range(32)]
    other_params = [SamplingParams(temperature=rng.uniform(0.5, 1.5), top_k=rng.choice([0, 5, 40]),
                                   min_p=rng.choice([0.0, 0.05]), max_tokens=rng.randint(4, 30),
                                   seed=rng.choice([None, rng.randrange(1000)])) for _ in others]
    for position in (0, 17, 32):  # first, middle and last of the batch
        prompts = others[:position] + [PROMPT] + others[position:]
        params = other_params[:position] + [target] + other_params[position:]
        outs = llm.generate(prompts, params, use_tqdm=False)
        assert outs[position].outputs[0].token_ids == alone
    unseeded = llm.generate([PROMPT] * 2, SamplingParams(temperature=0.9, max_tokens=24), use_tqdm=False)
    assert unseeded[0].outputs[0].token_ids != unseeded[1].outputs[0].token_ids, "without a seed, draws differ"
