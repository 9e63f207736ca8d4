"""Bad input gets a clear error that says what to change, and the engine keeps working."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from deepinfer import LLM, SamplingParams

GOOD = SamplingParams(temperature=0, max_tokens=8)


@pytest.fixture(scope="module")
def llm(tiny_llama):
    return LLM(tiny_llama, max_model_len=64)


@pytest.fixture(scope="module")
def reference(llm):
    return [o.outputs[0].token_ids for o in llm.generate(["Hello world", "The quick brown"], GOOD, use_tqdm=False)]


BAD_CALLS = {
    "negative max_tokens": (lambda llm: SamplingParams(max_tokens=-1), ValueError, r"max_tokens must be an integer >= 1"),
    "top_p zero": (lambda llm: SamplingParams(top_p=0), ValueError, r"top_p must be in \(0, 1\]"),
    "negative temperature": (lambda llm: SamplingParams(temperature=-0.5), ValueError, r"temperature must be"),
    "top_k below -1": (lambda llm: SamplingParams(top_k=-5), ValueError, r"top_k must be 0 or -1"),
    "n zero": (lambda llm: SamplingParams(n=0), ValueError, r"SamplingParams.n must be an integer >= 1"),
    "min_p above one": (lambda llm: SamplingParams(min_p=1.5), ValueError, r"min_p must be in \[0, 1\]"),
    "repetition_penalty zero": (lambda llm: SamplingParams(repetition_penalty=0), ValueError, r"repetition_penalty"),
    "empty stop string": (lambda llm: SamplingParams(stop=[""]), ValueError, r"stop must be a non-empty string"),
    "min_tokens above max_tokens": (lambda llm: SamplingParams(max_tokens=3, min_tokens=5), ValueError,
                                    r"min_tokens must be <= max_tokens"),
    "string max_tokens": (lambda llm: SamplingParams(max_tokens="8"), ValueError, r"max_tokens must be"),
    "prompt longer than max_model_len": (lambda llm: llm.generate([[5] * 64], GOOD), ValueError,
                                         r"prompt has 64 tokens but max_model_len is 64"),
    "empty prompt list": (lambda llm: llm.generate([], GOOD), ValueError, r"prompts is empty"),
    "empty token prompt": (lambda llm: llm.generate([[]], GOOD), ValueError, r"prompt is empty"),
    "token id outside vocab": (lambda llm: llm.generate([[5, 99999]], GOOD), ValueError, r"not in the vocabulary"),
    "negative token id": (lambda llm: llm.generate([[5, -1]], GOOD), ValueError, r"not in the vocabulary"),
    "prompt of wrong type": (lambda llm: llm.generate([3.5], GOOD), ValueError, r"prompts\[0\] must be a string"),
    "params count mismatch": (lambda llm: llm.generate(["a", "b"], [GOOD] * 3), ValueError,
                              r"got 3 SamplingParams for 2 prompts"),
    "too many logprobs": (lambda llm: llm.generate(["a"], SamplingParams(logprobs=100)), ValueError,
                          r"more than max_logprobs=20"),
    "stop token outside vocab": (lambda llm: llm.generate(["a"], SamplingParams(stop_token_ids=[10**6])), ValueError,
                                 r"stop_token_ids has 1000000"),
    "one bad prompt in a batch": (lambda llm: llm.generate(["fine", [1, 2, 10**7], "fine"], GOOD), ValueError,
                                  r"not in the vocabulary"),
    "chat with unknown role": (lambda llm: llm.chat([{"role": "wizard", "content": "hi"}]), ValueError,
                               r"role'\] must be one of"),
    "chat with no messages": (lambda llm: llm.chat([]), ValueError, r"non-empty list"),
    "params of wrong type": (lambda llm: llm.generate(["a"], {"temperature": 0}), TypeError,
                             r"sampling_params must be a SamplingParams"),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_call_gets_a_clear_error_and_engine_still_works(name, llm, reference):
    call, error, message = BAD_CALLS[name]
    with pytest.raises(error, match=message):
        call(llm)
    assert not llm.engine.has_unfinished_requests(), "nothing of the bad call was queued"
    again = llm.generate(["Hello world", "The quick brown"], GOOD, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in again] == reference


def _broken_checkpoint(src, tmp_path, edit):
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    edit(dst)
    return str(dst)


def _set_config(**changes):
    def edit(path):
        cfg = json.loads((path / "config.json").read_text())
        cfg.update(changes)
        (path / "config.json").write_text(json.dumps(cfg))
    return edit


BAD_ENGINES = {
    "unknown dtype": (dict(dtype="float64"), ValueError, r"dtype must be one of auto, float32, bfloat16, float16"),
    "missing model path": (dict(model="/no/such/model"), FileNotFoundError, r"model path '/no/such/model' does not exist"),
    "model file that is not gguf": (dict(model=__file__), ValueError, r"is not a .gguf file"),
    "bad block size": (dict(block_size=7), ValueError, r"block_size must be a power of two"),
    "unknown argument": (dict(max_batch=3), TypeError, r"unknown engine argument\(s\) max_batch"),
    "unknown device": (dict(device="tpu"), ValueError, r"device must be auto, cpu, cuda or cuda:N"),
    "max_model_len beyond the model": (dict(max_model_len=10**6), ValueError, r"longer than the model's context"),
    "kv cache too small": (dict(num_kv_blocks=2), ValueError, r"the KV cache has room for 16 tokens"),
    "zero max_num_seqs": (dict(max_num_seqs=0), ValueError, r"max_num_seqs must be a positive integer"),
    "gpu memory fraction above one": (dict(gpu_memory_utilization=1.5), ValueError, r"gpu_memory_utilization"),
}


@pytest.mark.parametrize("name", BAD_ENGINES)
def test_bad_engine_arguments(name, tiny_llama):
    kwargs, error, message = BAD_ENGINES[name]
    kwargs = {"model": tiny_llama, "max_model_len": 64, **kwargs}
    with pytest.raises(error, match=message):
        LLM(**kwargs)


def test_unsupported_architecture_is_named(tiny_llama, tmp_path):
    path = _broken_checkpoint(tiny_llama, tmp_path, _set_config(architectures=["FalconForCausalLM"]))
    with pytest.raises(ValueError, match=r"unsupported model architecture FalconForCausalLM; deepinfer supports: "):
        LLM(path)


def test_tensor_of_wrong_shape_is_named(tiny_llama, tmp_path):
    path = _broken_checkpoint(tiny_llama, tmp_path, _set_config(intermediate_size=96))
    with pytest.raises(ValueError, match=r"checkpoint tensor 'model.layers.0.mlp.(gate|up|down)_proj.weight' has shape"):
        LLM(path)


def test_missing_tensor_is_named(tiny_llama, tmp_path):
    from safetensors.torch import load_file, save_file

    def drop_tensor(path):
        tensors = load_file(path / "model.safetensors")
        del tensors["model.layers.1.self_attn.k_proj.weight"]
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})

    path = _broken_checkpoint(tiny_llama, tmp_path, drop_tensor)
    with pytest.raises(ValueError, match=r"no tensor for .*layers.1.self_attn.qkv_proj.weight \(k_proj\)"):
        LLM(path)


def test_missing_weights_file_is_named(tiny_llama, tmp_path):
    path = _broken_checkpoint(tiny_llama, tmp_path, lambda p: (p / "model.safetensors").unlink())
    with pytest.raises(FileNotFoundError, match=r"has no weights"):
        LLM(path)


def test_unknown_rope_type_is_named(tiny_llama, tmp_path):
    path = _broken_checkpoint(tiny_llama, tmp_path, _set_config(rope_scaling={"rope_type": "longrope", "factor": 2.0,
                                                                             "short_factor": [1.0] * 8,
                                                                             "long_factor": [1.0] * 8}))
    with pytest.raises(ValueError, match=r"rope_type 'longrope' .* is not supported"):
        LLM(path)


def test_sharded_checkpoint_loads(tiny_llama, tmp_path):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    dst = tmp_path / "sharded"
    model.save_pretrained(dst, max_shard_size="100KB")
    shutil.copy(f"{tiny_llama}/tokenizer.json", dst)
    shutil.copy(f"{tiny_llama}/tokenizer_config.json", dst)
    assert (dst / "model.safetensors.index.json").is_file()
    sharded = LLM(str(dst), max_model_len=64).generate(["Hello world"], GOOD, use_tqdm=False)
    single = LLM(tiny_llama, max_model_len=64).generate(["Hello world"], GOOD, use_tqdm=False)
    assert sharded[0].outputs[0].token_ids == single[0].outputs[0].token_ids


def test_a_failing_step_aborts_only_that_call(llm, reference, monkeypatch):
    original = llm.engine.worker.execute_model
    calls = {"n": 0}

    def flaky(scheduled):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated device failure")
        return original(scheduled)

    monkeypatch.setattr(llm.engine.worker, "execute_model", flaky)
    with pytest.raises(RuntimeError, match="simulated device failure"):
        llm.generate(["Hello world", "The quick brown"], GOOD, use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()
    assert llm.stats().kv_cache_usage == 0.0
    again = llm.generate(["Hello world", "The quick brown"], GOOD, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in again] == reference
