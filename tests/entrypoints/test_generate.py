"""The offline API: prompts in every accepted form, seeded sampling, n, stop rules, logprobs."""

from __future__ import annotations

import math

import pytest

from deepinfer import LLM, SamplingParams

PROMPTS = ["Hello world!", "The quick brown fox", "def main():", "Numbers 0 1 2 3"]


@pytest.fixture(scope="module")
def llm(tiny_llama):
    return LLM(tiny_llama, max_model_len=128)


def texts(outputs):
    return [[c.text for c in o.outputs] for o in outputs]


def test_prompt_forms_and_output_fields(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode(PROMPTS[0])
    params = SamplingParams(temperature=0, max_tokens=5)
    by_text = llm.generate(PROMPTS[0], params, use_tqdm=False)[0]
    by_ids = llm.generate([ids], params, use_tqdm=False)[0]
    by_flat_ids = llm.generate(ids, params, use_tqdm=False)[0]
    by_dict = llm.generate([{"prompt_token_ids": ids}, {"prompt": PROMPTS[0]}], params, use_tqdm=False)
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids == by_flat_ids.outputs[0].token_ids
    assert [o.outputs[0].token_ids for o in by_dict] == [by_text.outputs[0].token_ids] * 2
    assert by_text.prompt == PROMPTS[0] and by_ids.prompt is None
    assert by_text.prompt_token_ids == ids
    c = by_text.outputs[0]
    assert c.index == 0 and len(c.token_ids) == 5 and c.finish_reason == "length"
    assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    m = by_text.metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
    assert by_text.finished and by_text.request_id != by_ids.request_id


def test_outputs_keep_prompt_order_with_per_prompt_params(llm):
    params = [SamplingParams(temperature=0, max_tokens=n) for n in (1, 7, 3, 5)]
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [1, 7, 3, 5]
    assert [o.prompt for o in outputs] == PROMPTS


def test_same_seed_same_output_different_seed_different_output(llm):
    def run(seed):
        return texts(llm.generate(PROMPTS, SamplingParams(temperature=1.0, max_tokens=16, seed=seed),
                                  use_tqdm=False))

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_seeded_request_ignores_the_rest_of_the_batch(llm):
    params = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=16, seed=3)
    alone = llm.generate([PROMPTS[1]], params, use_tqdm=False)[0].outputs[0].token_ids
    others = SamplingParams(temperature=1.0, max_tokens=20)
    batch = llm.generate([PROMPTS[0], PROMPTS[1], PROMPTS[2]], [others, params, others], use_tqdm=False)
    assert batch[1].outputs[0].token_ids == alone


def test_engine_seed_makes_unseeded_runs_reproducible(tiny_llama):
    params = SamplingParams(temperature=1.0, max_tokens=12)
    a = texts(LLM(tiny_llama, max_model_len=128, seed=5).generate(PROMPTS, params, use_tqdm=False))
    b = texts(LLM(tiny_llama, max_model_len=128, seed=5).generate(PROMPTS, params, use_tqdm=False))
    assert a == b


def test_n_returns_n_distinct_completions(llm):
    out = llm.generate(PROMPTS[0], SamplingParams(n=4, temperature=1.0, max_tokens=12, seed=1), use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in out.outputs}) == 4
    single = llm.generate(PROMPTS[0], SamplingParams(temperature=1.0, max_tokens=12, seed=1), use_tqdm=False)[0]
    assert out.outputs[0].token_ids == single.outputs[0].token_ids, "sample 0 uses the request's own seed"


def test_greedy_equals_top_k_1(llm):
    greedy = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=10), use_tqdm=False)
    top1 = llm.generate(PROMPTS, SamplingParams(temperature=1.5, top_k=1, max_tokens=10, seed=9), use_tqdm=False)
    assert texts(greedy) == texts(top1)


def test_stop_string_ends_generation_and_is_cut(llm):
    free = llm.generate(PROMPTS[2], SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)[0].outputs[0]
    stop = free.text[6:9]
    assert len(stop) == 3
    cut = llm.generate(PROMPTS[2], SamplingParams(temperature=0, max_tokens=24, stop=[stop]),
                       use_tqdm=False)[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == free.text[: free.text.find(stop)]
    assert stop not in cut.text
    assert len(cut.token_ids) < len(free.token_ids)


def test_stop_token_ids_end_generation(llm):
    free = llm.generate(PROMPTS[3], SamplingParams(temperature=0, max_tokens=20), use_tqdm=False)[0].outputs[0]
    stop_id = free.token_ids[4]
    first = free.token_ids.index(stop_id)
    out = llm.generate(PROMPTS[3], SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_id]),
                       use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop_id
    assert out.token_ids == free.token_ids[: first + 1]


def test_eos_stops_unless_ignored_and_min_tokens_holds_it_back(llm):
    eos = llm.get_tokenizer().eos_token_id
    free = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)[0].outputs[0]
    # Make the 4th greedy token act as EOS through stop_token_ids to check min_tokens suppression.
    target = free.token_ids[3]
    held = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, stop_token_ids=[target],
                                                   min_tokens=free.token_ids.index(target) + 2),
                        use_tqdm=False)[0].outputs[0]
    assert len(held.token_ids) > free.token_ids.index(target) + 1
    ignored = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True),
                           use_tqdm=False)[0].outputs[0]
    assert len(ignored.token_ids) == 16 and ignored.finish_reason == "length"
    assert eos is not None


def test_logprobs_are_top_n_and_consistent(llm):
    out = llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=6, logprobs=3),
                       use_tqdm=False)[0].outputs[0]
    assert len(out.logprobs) == 6
    for token, candidates in zip(out.token_ids, out.logprobs):
        assert token in candidates
        ranked = sorted(candidates.values(), key=lambda lp: lp.rank)
        assert [lp.rank for lp in ranked][:3] == [1, 2, 3]
        assert all(a.logprob >= b.logprob for a, b in zip(ranked, ranked[1:]))
        assert candidates[token].rank == 1, "greedy picks the most likely token"
        assert sum(math.exp(lp.logprob) for lp in ranked) <= 1.0 + 1e-5
        assert all(isinstance(lp.decoded_token, str) for lp in ranked)


def test_penalties_change_the_output(llm):
    base = SamplingParams(temperature=0, max_tokens=24)
    plain = texts(llm.generate(PROMPTS, base, use_tqdm=False))
    for change in (dict(repetition_penalty=1.8), dict(frequency_penalty=2.0), dict(presence_penalty=2.0)):
        penalized = texts(llm.generate(PROMPTS, base.clone(**change), use_tqdm=False))
        assert penalized != plain, f"{change} had no effect"


def test_repetition_penalty_reduces_repeats(llm):
    def repeats(outputs):
        return sum(len(c.token_ids) - len(set(c.token_ids)) for o in outputs for c in o.outputs)

    base = SamplingParams(temperature=0, max_tokens=32)
    assert repeats(llm.generate(PROMPTS, base.clone(frequency_penalty=2.0), use_tqdm=False)) < \
        repeats(llm.generate(PROMPTS, base, use_tqdm=False))


def test_chat_renders_the_template(llm):
    messages = [{"role": "user", "content": "Hello world!"}]
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)[0]
    assert out.prompt == "<s>user\nHello world!</s>\n<s>assistant\n"
    two = llm.chat([messages, messages], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in two] == [out.outputs[0].token_ids] * 2
    streamed = list(llm.stream_chat(messages, SamplingParams(temperature=0, max_tokens=4)))
    assert streamed[-1] == out.outputs[0].text
    assert all(b.startswith(a) for a, b in zip(streamed, streamed[1:]))


def test_abort_mid_generation_leaves_engine_clean(llm):
    stream = llm.stream_chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=0, max_tokens=50))
    next(stream)
    stream.close()  # the consumer walks away: the request is aborted
    assert not llm.engine.has_unfinished_requests()
    assert llm.stats().kv_cache_usage == 0.0
