"""Zero-overhead (async) scheduling gives exactly the outputs of the synchronous loop.

With async scheduling the engine launches step N+1 before it has read step N's tokens; these
tests run the same workloads both ways and compare every token, text, logprob and finish
reason, across the cases where running one step ahead could go wrong: stop strings and stop
tokens (the in-flight token must be discarded), max_tokens, seeded sampling with penalties
(the in-flight token feeds the penalty), n > 1, abort mid-run and preemption.
"""

from __future__ import annotations

import pytest

from deepinfer import LLM, SamplingParams
from deepinfer.config import EngineConfig
from deepinfer.engine.llm_engine import LLMEngine

PROMPTS = ["Hello world!", "The quick brown fox", "def main():", "Numbers 0 1 2 3", "Once upon a time"]


def _pair(tiny_llama, **kwargs):
    return {mode: LLM(model=tiny_llama, max_model_len=64, async_scheduling=mode, **kwargs) for mode in (False, True)}


def _summary(outputs):
    """Everything a user sees; logprobs rounded to 1e-4, because a request that stops on EOS is
    still in the next (discarded) step's batch with async scheduling, and a batch of another size
    may round the logits differently (bitwise equality across batches is batch-invariant mode's
    job, not this one's)."""
    return [[(c.index, c.text, c.token_ids, c.finish_reason, c.stop_reason,
              None if c.logprobs is None else
              [sorted((t, round(lp.logprob, 4), lp.rank) for t, lp in d.items()) for d in c.logprobs])
             for c in o.outputs]
            for o in outputs]


@pytest.fixture(scope="module")
def engines(tiny_llama):
    return _pair(tiny_llama)


def test_greedy_max_tokens_and_logprobs_match(engines):
    params = [SamplingParams(temperature=0, max_tokens=n, logprobs=2) for n in (1, 2, 7, 12, 20)]
    sync, fast = (_summary(engines[m].generate(PROMPTS, params, use_tqdm=False)) for m in (False, True))
    assert sync == fast
    assert [len(o[0][2]) for o in fast] == [1, 2, 7, 12, 20]


def test_seeded_sampling_with_penalties_and_n_match(engines):
    params = [SamplingParams(temperature=1.0, top_p=0.9, max_tokens=16, seed=7),
              SamplingParams(temperature=0.8, top_k=20, min_p=0.05, max_tokens=16, seed=3, n=3),
              SamplingParams(temperature=1.0, max_tokens=16, seed=11, repetition_penalty=1.3,
                             presence_penalty=0.5, frequency_penalty=0.4),
              SamplingParams(temperature=0, max_tokens=16, frequency_penalty=1.5, min_tokens=4),
              SamplingParams(temperature=1.2, max_tokens=16, seed=5, logprobs=3)]
    sync, fast = (_summary(engines[m].generate(PROMPTS, params, use_tqdm=False)) for m in (False, True))
    assert sync == fast


def test_stop_strings_and_stop_tokens_match(engines):
    free = engines[False].generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    stops = [o.outputs[0].text[5:8] for o in free]
    stop_ids = [o.outputs[0].token_ids[3] for o in free]
    params = [SamplingParams(temperature=0, max_tokens=24, stop=[s]) for s in stops[:3]] + \
             [SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[t]) for t in stop_ids[3:]]
    sync, fast = (_summary(engines[m].generate(PROMPTS, params, use_tqdm=False)) for m in (False, True))
    assert sync == fast
    assert all(o[0][3] == "stop" for o in fast), "every request ended on its stop string or token"
    assert all(len(o[0][2]) < 24 for o in fast)


def test_preemption_matches(tiny_llama):
    pair = _pair(tiny_llama, block_size=4, num_kv_blocks=20, max_num_batched_tokens=16, max_num_seqs=4)
    params = SamplingParams(temperature=0, max_tokens=20)
    results = {}
    for mode, llm in pair.items():
        results[mode] = _summary(llm.generate(PROMPTS, params, use_tqdm=False))
        assert llm.engine.stats().num_preemptions > 0, "the small pool must force preemption"
        assert llm.engine.stats().kv_cache_usage == 0.0
    assert results[False] == results[True]


def test_abort_mid_run_keeps_the_others_intact(tiny_llama):
    params = SamplingParams(temperature=0, max_tokens=12)
    reference = LLM(model=tiny_llama, max_model_len=64, async_scheduling=False)
    expected = {p: o.outputs[0].token_ids for p, o in zip(PROMPTS, reference.generate(PROMPTS, params, use_tqdm=False))}
    engine = LLMEngine(EngineConfig.from_kwargs(model=tiny_llama, max_model_len=64, async_scheduling=True))
    tok = engine.tokenizer
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(str(i), tok.encode(prompt), params, prompt=prompt, stream=True)
    seen: dict[str, list[int]] = {}
    steps = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen[out.request_id] = out.outputs[0].token_ids
        steps += 1
        if steps == 4:
            engine.abort_request(["1", "3"])
            aborted_at = {rid: list(seen.get(rid, [])) for rid in ("1", "3")}
    for rid in ("0", "2", "4"):
        assert seen[rid] == expected[PROMPTS[int(rid)]]
    for rid in ("1", "3"):
        assert seen.get(rid, []) == aborted_at[rid], "nothing is reported for an aborted request"
        assert seen.get(rid, []) == expected[PROMPTS[int(rid)]][:len(seen.get(rid, []))]
    assert engine.stats().kv_cache_usage == 0.0


def test_async_runs_one_step_ahead(tiny_llama):
    """The step that launches a request's first decode returns before that token is processed:
    outputs trail launches by one step, and the last call only drains."""
    engine = LLMEngine(EngineConfig.from_kwargs(model=tiny_llama, max_model_len=64, async_scheduling=True))
    engine.add_request("r", [5, 6, 7], SamplingParams(temperature=0, max_tokens=3), stream=True)
    lengths = []
    while engine.has_unfinished_requests():
        outs = engine.step()
        lengths.append(len(outs[0].outputs[0].token_ids) if outs else 0)
    assert lengths == [0, 1, 2, 3]
    assert engine.step_timings.steps == 3, "three model steps for three tokens; the fourth call launched nothing"


def test_environment_variable_sets_the_default(tiny_llama, monkeypatch):
    def engine(**kw):
        return LLMEngine(EngineConfig.from_kwargs(model=tiny_llama, max_model_len=64, **kw))

    monkeypatch.delenv("DEEPINFER_ZERO_OVERHEAD_SCHEDULING", raising=False)
    assert not engine().async_scheduling, "unset: off on CPU (nothing to overlap)"
    monkeypatch.setenv("DEEPINFER_ZERO_OVERHEAD_SCHEDULING", "1")
    assert engine().async_scheduling
    monkeypatch.setenv("DEEPINFER_ZERO_OVERHEAD_SCHEDULING", "0")
    assert not engine().async_scheduling
    assert engine(async_scheduling=True).async_scheduling, "the config field wins over the variable"
