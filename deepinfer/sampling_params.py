"""SamplingParams: how one request chooses its next tokens and when it stops."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

_NUMBER = (int, float)


def _fail(name: str, allowed: str, value: Any) -> None:
    raise ValueError(f"SamplingParams.{name} must be {allowed}, got {value!r}")


def _check_int(name: str, value: Any, lo: int | None = None, allowed: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(name, allowed or "an integer", value)
    if lo is not None and value < lo:
        _fail(name, allowed or f"an integer >= {lo}", value)


def _check_float(name: str, value: Any, ok: bool, allowed: str) -> None:
    if isinstance(value, bool) or not isinstance(value, _NUMBER) or value != value or not ok:
        _fail(name, allowed, value)


@dataclass
class SamplingParams:
    """Sampling and stopping rules of one request (field names follow vLLM / OpenAI)."""

    n: int = 1
    """Number of completions to return for the prompt."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax) decoding."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability sums to top_p, in (0, 1]."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 (or -1) keeps all."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the most likely token's, in [0, 1]."""
    presence_penalty: float = 0.0
    """Subtracted once from the logit of every token already generated, in [-2, 2]."""
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit once per time it was generated, in [-2, 2]."""
    repetition_penalty: float = 1.0
    """Divides positive (multiplies negative) logits of tokens in the prompt or output; > 0, 1 is off."""
    max_tokens: int | None = 16
    """Most tokens to generate; None means up to the model's context length."""
    min_tokens: int = 0
    """EOS and stop_token_ids are suppressed until this many tokens were generated."""
    stop: str | list[str] | None = None
    """Strings that end generation; the stop string itself is not included in the text."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end generation (in addition to EOS unless ignore_eos)."""
    ignore_eos: bool = False
    """Keep generating past the end-of-sequence token (benchmarks)."""
    seed: int | None = None
    """Seed of this request's sampler: the same seed gives the same output, whatever else runs."""
    logprobs: int | None = None
    """Return this many top log-probabilities (plus the chosen token's) per generated token."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the output text."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        else:
            self.stop = list(self.stop)
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == -1:
            self.top_k = 0
        self._validate()

    def _validate(self) -> None:
        _check_int("n", self.n, 1)
        t = self.temperature
        _check_float("temperature", t, isinstance(t, _NUMBER) and t >= 0, "a number >= 0 (0 = greedy)")
        p = self.top_p
        _check_float("top_p", p, isinstance(p, _NUMBER) and 0 < p <= 1, "in (0, 1]")
        _check_int("top_k", self.top_k, 0, "0 or -1 (disabled) or an integer >= 1")
        m = self.min_p
        _check_float("min_p", m, isinstance(m, _NUMBER) and 0 <= m <= 1, "in [0, 1]")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            _check_float(name, v, isinstance(v, _NUMBER) and -2 <= v <= 2, "in [-2, 2]")
        r = self.repetition_penalty
        _check_float("repetition_penalty", r, isinstance(r, _NUMBER) and r > 0, "a number > 0 (1 = off)")
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, 1, "an integer >= 1 or None")
        _check_int("min_tokens", self.min_tokens, 0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            _fail("min_tokens", f"<= max_tokens ({self.max_tokens})", self.min_tokens)
        for s in self.stop:
            if not isinstance(s, str) or not s:
                _fail("stop", "a non-empty string or a list of non-empty strings", s)
        for tid in self.stop_token_ids:
            _check_int("stop_token_ids", tid, 0, "a list of token ids >= 0")
        if self.seed is not None:
            _check_int("seed", self.seed, None, "an integer or None")
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, 0, "an integer >= 0 or None")
        for name in ("ignore_eos", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, "a bool", getattr(self, name))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def clone(self, **changes: Any) -> "SamplingParams":
        return replace(self, **changes)
