"""Incremental detokenization and stop strings."""

from __future__ import annotations

import random

import pytest

from deepinfer.engine.output import IncrementalDetokenizer
from tests.tiny_models import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


@pytest.mark.parametrize("text", [
    "Hello world! Once upon a time.",
    "naïve café — déjà vu ☕ 🦊🦊 end",
    "def main():\n    print('hello')\n\n  spaces   here",
])
def test_incremental_text_equals_full_decode(tokenizer, text):
    ids = tokenizer.encode(text)
    # Split where the prompt ends on a whole character, so the output decodes on its own.
    split = next(i for i in range(3, len(ids)) if "\ufffd" not in tokenizer.decode(ids[:i]))
    prompt, output = ids[:split], ids[split:]
    detok = IncrementalDetokenizer(tokenizer, prompt, skip_special_tokens=True)
    pieces = [detok.add(t) for t in output]
    streamed = "".join(pieces) + detok.flush()
    assert streamed == tokenizer.decode(output)
    assert "\ufffd" not in "".join(pieces), "no half characters are streamed"


def test_random_tokens_stream_to_the_full_decode(tokenizer):
    rng = random.Random(0)
    for _ in range(20):
        ids = [rng.randrange(3, tokenizer.vocab_size) for _ in range(30)]
        detok = IncrementalDetokenizer(tokenizer, ids[:4], skip_special_tokens=True)
        streamed = "".join(detok.add(t) for t in ids[4:]) + detok.flush()
        assert streamed == tokenizer.decode(ids[4:])


def test_special_tokens_are_skipped_or_kept(tokenizer):
    ids = tokenizer.encode("hi") + [tokenizer.eos_token_id] + tokenizer.encode(" there")
    for skip in (True, False):
        detok = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=skip)
        streamed = "".join(detok.add(t) for t in ids) + detok.flush()
        assert streamed == tokenizer.decode(ids, skip_special_tokens=skip)
        assert ("</s>" in streamed) is (not skip)
