"""kv_cache_dtype="fp8": keys and values stored as float8 e4m3 (half the bytes per token)."""

from __future__ import annotations

import pytest

from deepinfer import LLM, SamplingParams

PROMPTS = ["Hello world!", "The quick brown fox", "def main():"]


def _first_token_logprobs(llm):
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12, logprobs=5), use_tqdm=False)
    return outs


def test_fp8_cache_halves_bytes_and_stays_close(tiny_llama):
    full = LLM(tiny_llama, max_model_len=64, cpu_kv_cache_gib=0.001)
    fp8 = LLM(tiny_llama, max_model_len=64, cpu_kv_cache_gib=0.001, kv_cache_dtype="fp8")
    assert str(fp8.engine.worker.cache_engine.kv_caches[0].dtype) == "torch.float8_e4m3fn"
    # The same memory holds twice the blocks (float32 model: a quarter of the bytes, capped only by
    # the memory size here).
    assert fp8.engine.worker.num_blocks >= 2 * full.engine.worker.num_blocks
    ref, got = _first_token_logprobs(full), _first_token_logprobs(fp8)
    for r, g in zip(ref, got):
        want, have = r.outputs[0].logprobs[0], g.outputs[0].logprobs[0]
        shared = set(want) & set(have)
        assert shared, "the first token's top-5 candidates overlap"
        for token in shared:
            # Measured on this model: up to ~0.55 nats (its keys and values are small, ~0.13 on
            # average, where e4m3 has least precision); a cache read wrongly is off by far more.
            assert abs(want[token].logprob - have[token].logprob) < 0.75, "e4m3 rounding moves logprobs a little"
    # Attention reads every key from the cache, the prompt's too: greedy continuations still agree
    # on their first tokens.
    assert all(r.outputs[0].token_ids[:4] == g.outputs[0].token_ids[:4] for r, g in zip(ref, got))


def test_bad_kv_cache_dtype_is_refused(tiny_llama):
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        LLM(tiny_llama, max_model_len=64, kv_cache_dtype="int4")
