"""The Llama family against Hugging Face transformers, token for token.

Acceptance of the engine core: for tiny random Llama / Mistral / Qwen2 / Qwen3 checkpoints,
prefill logits match transformers within 1e-4 (fp32), and greedy generation of 24 tokens for a
batch of prompts of lengths 3..60 equals transformers ``generate`` -- also with prefix caching
over shared prefixes, a pool small enough to force preemption, a token budget small enough to
force chunked prefill, and max_num_seqs=2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from deepinfer import LLM, SamplingParams
from deepinfer.layers.attention import AttentionBatch, get_attention_backend
from deepinfer.worker.cache_engine import CacheEngine
from tests.tiny_models import ARCHS

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)


def make_prompts(vocab_size: int = 384) -> list[list[int]]:
    """Lengths 3..60, two of them sharing long prefixes with another prompt."""
    g = torch.Generator().manual_seed(1234)
    rand = lambda n: torch.randint(3, vocab_size, (n,), generator=g).tolist()  # noqa: E731
    base = rand(60)
    return [rand(3), rand(9), rand(17), rand(33), rand(47), base, base[:40] + rand(7), base[:52] + rand(3)]


PROMPTS = make_prompts()


@pytest.fixture(scope="module")
def hf_reference(tiny_checkpoints):
    """Per architecture: the HF model and its greedy continuations of PROMPTS (one prompt at a time)."""
    refs = {}
    for arch in ARCHS:
        model = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoints[arch], dtype=torch.float32)
        model.eval()
        continuations = []
        for prompt in PROMPTS:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
            continuations.append(out[0, len(prompt):].tolist())
        refs[arch] = (model, continuations)
    return refs


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_logits_match_transformers(arch, tiny_checkpoints, hf_reference):
    llm = LLM(tiny_checkpoints[arch], max_model_len=128)
    model = llm.engine.worker.model
    hf_model, _ = hf_reference[arch]
    # All prompts as one flat variable-length prefill batch through the paged cache.
    backend = get_attention_backend("paged")
    bs = 16
    lens = [len(p) for p in PROMPTS]
    blocks_per = [-(-n // bs) for n in lens]
    cache = CacheEngine(backend, model.num_kv_caches, 1 + sum(blocks_per), bs, model.arch.num_kv_heads,
                        model.arch.head_dim, torch.float32, torch.device("cpu"))
    tables, next_block, slots = [], 1, []
    for n, nb in zip(lens, blocks_per):
        table = list(range(next_block, next_block + nb))
        next_block += nb
        tables.append(table)
        slots += [table[i // bs] * bs + i % bs for i in range(n)]
    batch = AttentionBatch(np.cumsum([0] + lens), np.array(lens), tables, np.array(slots), 0, bs)
    ids = torch.tensor([t for p in PROMPTS for t in p])
    positions = torch.tensor([i for n in lens for i in range(n)])
    with torch.inference_mode():
        hidden = model(ids, positions, backend.build_metadata(batch, cache.kv_caches, torch.device("cpu")))
        ours = model.compute_logits(hidden)
        start = 0
        for prompt in PROMPTS:
            theirs = hf_model(torch.tensor([prompt])).logits[0]
            mine = ours[start : start + len(prompt)]
            start += len(prompt)
            assert mine.shape == theirs.shape
            err = (mine - theirs).abs().max().item()
            assert err < 1e-4, f"{arch}: prefill logits differ by {err}"


SCENARIOS = {
    "default": dict(),
    "prefix_caching_shared_prefixes": dict(enable_prefix_caching=True),
    "preemption_small_pool": dict(num_kv_blocks=12),
    "chunked_prefill_small_budget": dict(max_num_batched_tokens=16),
    "max_num_seqs_2": dict(max_num_seqs=2),
    "everything_at_once": dict(num_kv_blocks=12, max_num_batched_tokens=16, max_num_seqs=3),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_matches_transformers(arch, scenario, tiny_checkpoints, hf_reference):
    _, expected = hf_reference[arch]
    llm = LLM(tiny_checkpoints[arch], max_model_len=128, **SCENARIOS[scenario])
    outputs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    for i, out in enumerate(outputs):
        assert out.outputs[0].token_ids == expected[i], f"{arch}/{scenario}: prompt {i} (len {len(PROMPTS[i])})"
        assert out.outputs[0].finish_reason == "length"
    stats = llm.stats()
    if scenario == "prefix_caching_shared_prefixes":
        # The second pass finds every prompt's full blocks in the cache.
        again = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in again] == expected
        assert sum(o.num_cached_tokens for o in again) >= sum((len(p) - 1) // 16 * 16 for p in PROMPTS)
        assert llm.stats().prefix_cache_hit_rate > 0.3
    if scenario in ("preemption_small_pool", "everything_at_once"):
        assert stats.num_preemptions > 0, "the pool was meant to be too small for the batch"
    assert stats.num_running == stats.num_waiting == 0
    assert stats.kv_cache_usage == 0.0, "every block is released when the requests finish"


def test_shared_prefix_hits_within_one_batch(tiny_checkpoints, hf_reference):
    """Prompts that extend an earlier prompt reuse its blocks as soon as those are computed."""
    _, expected = hf_reference["llama"]
    llm = LLM(tiny_checkpoints["llama"], max_model_len=128, max_num_seqs=1)
    outputs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == expected
    # Prompts 6 and 7 share 40 and 52 tokens with prompt 5, which ran before them.
    assert outputs[6].num_cached_tokens == 32
    assert outputs[7].num_cached_tokens == 48


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_on_cpu_is_as_accurate_as_transformers_bfloat16(arch, tiny_checkpoints, hf_reference):
    """bf16 cannot match float32 token for token, so measure its error: the first-step top-5
    log-probabilities of deepinfer in bf16 stay as close to transformers' float32 ones as
    transformers' own bf16 model does (within 1.5x its worst error, plus rounding slack)."""
    hf_model, _ = hf_reference[arch]
    hf_bf16 = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoints[arch], dtype=torch.bfloat16)
    llm = LLM(tiny_checkpoints[arch], dtype="bfloat16", max_model_len=128)
    assert llm.engine.dtype == torch.bfloat16
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=1, logprobs=5), use_tqdm=False)
    ours_err = theirs_err = 0.0
    for prompt, out in zip(PROMPTS, outs):
        with torch.inference_mode():
            ref = hf_model(torch.tensor([prompt])).logits[0, -1].log_softmax(-1)
            theirs = hf_bf16(torch.tensor([prompt])).logits[0, -1].float().log_softmax(-1)
        for token_id, lp in out.outputs[0].logprobs[0].items():
            ours_err = max(ours_err, abs(lp.logprob - ref[token_id].item()))
            theirs_err = max(theirs_err, abs(theirs[token_id].item() - ref[token_id].item()))
    assert ours_err <= 1.5 * theirs_err + 0.02, f"{arch}: bf16 error {ours_err:.3f} vs transformers' {theirs_err:.3f}"
