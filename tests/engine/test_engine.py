"""LLMEngine's step loop: idle steps return at once; outputs stream; stats add up."""

from __future__ import annotations

import time

from deepinfer import SamplingParams
from deepinfer.config import EngineConfig
from deepinfer.engine.llm_engine import LLMEngine


def test_idle_step_returns_immediately_without_running_the_model(tiny_llama, monkeypatch):
    engine = LLMEngine(EngineConfig.from_kwargs(model=tiny_llama, max_model_len=64))
    monkeypatch.setattr(engine.worker, "execute_model", lambda s: (_ for _ in ()).throw(AssertionError("ran")))
    start = time.perf_counter()
    assert engine.step() == []
    assert time.perf_counter() - start < 0.01


def test_step_outputs_grow_until_finished(tiny_llama):
    engine = LLMEngine(EngineConfig.from_kwargs(model=tiny_llama, max_model_len=64))
    engine.add_request("r", [5, 6, 7], SamplingParams(temperature=0, max_tokens=4), stream=True)
    engine.add_request("quiet", [5, 6, 7], SamplingParams(temperature=0, max_tokens=4))
    lengths, finished, quiet = [], False, []
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.request_id == "quiet":
                quiet.append(out)
                continue
            lengths.append(len(out.outputs[0].token_ids))
            finished = out.finished
    assert lengths == [1, 2, 3, 4] and finished
    assert len(quiet) == 1 and quiet[0].finished, "a request that does not stream is reported once, finished"
    assert engine.stats().kv_cache_usage == 0.0


def test_duplicate_request_id_is_rejected(tiny_llama):
    engine = LLMEngine(EngineConfig.from_kwargs(model=tiny_llama, max_model_len=64))
    engine.add_request("same", [5, 6], SamplingParams(max_tokens=2))
    try:
        engine.add_request("same", [5, 6], SamplingParams(max_tokens=2))
    except ValueError as exc:
        assert "already in use" in str(exc)
    else:
        raise AssertionError("a second request with the same id was accepted")
