"""Config-only models with random weights (load_format="dummy"), as benchmarks use them."""

from __future__ import annotations

import json

import pytest

from deepinfer import LLM, SamplingParams
from deepinfer.models.presets import PRESETS


def test_preset_runs_with_dummy_weights_and_token_ids():
    llm = LLM("smollm2-135m", load_format="dummy", max_model_len=128)
    assert llm.get_tokenizer() is None
    out = llm.generate([[1, 2, 3], [4, 5]], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                       use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in out] == [6, 6]
    assert all(o.outputs[0].text == "" for o in out)
    assert llm.engine.worker.model.arch.num_layers == 30


def test_dummy_weights_are_reproducible_by_seed():
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    runs = [LLM("smollm2-135m", load_format="dummy", max_model_len=64, seed=s).generate([[7, 8, 9]], params,
                                                                                        use_tqdm=False)
            for s in (0, 0, 1)]
    ids = [r[0].outputs[0].token_ids for r in runs]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_config_json_file(tiny_llama, tmp_path):
    config = json.loads((__import__("pathlib").Path(tiny_llama) / "config.json").read_text())
    path = tmp_path / "my_config.json"
    path.write_text(json.dumps(config))
    llm = LLM(str(path), load_format="dummy", max_model_len=64)
    assert llm.engine.worker.model.arch.hidden_size == config["hidden_size"]


def test_preset_without_dummy_says_what_to_do():
    with pytest.raises(ValueError, match="config without weights; pass load_format='dummy'"):
        LLM("smollm2-135m", max_model_len=64)


def test_text_prompts_and_stop_strings_need_a_tokenizer():
    llm = LLM("smollm2-135m", load_format="dummy", max_model_len=64)
    with pytest.raises(ValueError, match="has no tokenizer; pass prompts as token ids"):
        llm.generate("hello")
    with pytest.raises(ValueError, match="stop needs a tokenizer"):
        llm.generate([[1, 2]], SamplingParams(stop=["x"]))


def test_dummy_loads_a_checkpoint_directory_without_reading_weights(tiny_llama, tmp_path):
    import shutil

    shutil.copytree(tiny_llama, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    llm = LLM(str(tmp_path / "m"), load_format="dummy", max_model_len=64)
    assert llm.generate("Hello", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].text is not None


def test_presets_build_their_configs():
    from deepinfer.models.presets import preset_config

    for name in PRESETS:
        assert preset_config(name).architectures, name
    assert preset_config("llama3-8b").num_hidden_layers == 32
