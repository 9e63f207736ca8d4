"""LLM: the offline API (vLLM-shaped).

    llm = LLM("path/to/model")
    outputs = llm.generate(["Hello"], SamplingParams(max_tokens=32))
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Sequence, Union

from tqdm import tqdm

from deepinfer import envs
from deepinfer.config import EngineConfig
from deepinfer.engine.llm_engine import EngineStats, LLMEngine
from deepinfer.outputs import RequestOutput
from deepinfer.recipe.chat import Message, render_chat
from deepinfer.sampling_params import SamplingParams

PromptType = Union[str, list[int], dict]
"""A prompt: text, token ids, or {"prompt": text} / {"prompt_token_ids": ids}."""


class LLM:
    """An engine for offline generation. Keyword arguments are EngineConfig fields
    (model, dtype, device, max_model_len, max_num_seqs, max_num_batched_tokens, block_size,
    enable_prefix_caching, gpu_memory_utilization, cpu_kv_cache_gib, num_kv_blocks, seed, ...)."""

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.config = EngineConfig.from_kwargs(model=model, **kwargs)
        self.engine = LLMEngine(self.config)

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def _require_tokenizer(self) -> Any:
        if self.engine.tokenizer is None:
            raise ValueError(f"model {self.engine.model_path!r} has no tokenizer; pass prompts as token ids")
        return self.engine.tokenizer

    def stats(self) -> EngineStats:
        return self.engine.stats()

    # ---- generation --------------------------------------------------------------------------
    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Generate completions for every prompt; outputs come back in the order of the prompts."""
        parsed = [self._parse_prompt(p, i) for i, p in enumerate(_as_prompt_list(prompts))]
        return self._run(parsed, _per_prompt(sampling_params, len(parsed)), use_tqdm)

    def chat(
        self,
        messages: list[Message] | list[list[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[RequestOutput]:
        """Generate replies to one conversation (a list of messages) or to a list of conversations."""
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            conversations = [messages]
        elif isinstance(messages, list) and messages:
            conversations = messages
        else:
            raise ValueError("messages must be a non-empty list of messages or a list of conversations")
        tok = self._require_tokenizer()
        parsed = []
        for conversation in conversations:
            text = render_chat(tok, conversation, add_generation_prompt, chat_template)
            parsed.append((text, tok.encode(text, add_special_tokens=False)))
        return self._run(parsed, _per_prompt(sampling_params, len(parsed)), use_tqdm)

    def stream_chat(
        self,
        messages: list[Message],
        sampling_params: SamplingParams | None = None,
        chat_template: str | None = None,
    ) -> Iterator[str]:
        """Reply to one conversation, yielding the reply's text so far after every step that adds to it."""
        params = sampling_params or SamplingParams()
        if params.n != 1:
            raise ValueError("stream_chat streams one completion; use SamplingParams(n=1)")
        tok = self._require_tokenizer()
        text = render_chat(tok, messages, True, chat_template)
        token_ids = tok.encode(text, add_special_tokens=False)
        engine = self.engine
        engine.validate_request(token_ids, params)
        rid = engine.new_request_id()
        engine.add_request(rid, token_ids, params, prompt=text, stream=True)
        finished = False
        try:
            while not finished:
                for out in engine.step():
                    if out.request_id == rid:
                        finished = out.finished
                        yield out.outputs[0].text
        finally:
            if not finished:
                engine.abort_request([rid])

    def _parse_prompt(self, prompt: Any, index: int) -> tuple[str | None, list[int]]:
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                prompt = list(prompt["prompt_token_ids"])
            elif "prompt" in prompt:
                prompt = prompt["prompt"]
            else:
                raise ValueError(f"prompts[{index}] is a dict without 'prompt' or 'prompt_token_ids'")
        if isinstance(prompt, str):
            return prompt, self._require_tokenizer().encode(prompt)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return None, list(prompt)
        raise ValueError(f"prompts[{index}] must be a string or a list of token ids, got {type(prompt).__name__}")

    def _run(self, prompts: list[tuple[str | None, list[int]]], params: list[SamplingParams],
             use_tqdm: bool) -> list[RequestOutput]:
        engine = self.engine
        for (_, token_ids), p in zip(prompts, params):
            engine.validate_request(token_ids, p)  # all or none: a bad prompt queues nothing
        ids = []
        for (text, token_ids), p in zip(prompts, params):
            rid = engine.new_request_id()
            engine.add_request(rid, token_ids, p, prompt=text)
            ids.append(rid)
        pending = set(ids)
        done: dict[str, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="Processed prompts", unit=" prompts",
                   disable=not (use_tqdm and envs.DEEPINFER_TQDM))
        start, generated = time.perf_counter(), 0
        try:
            while pending:
                for out in engine.step():
                    if out.request_id in pending and out.finished:
                        pending.discard(out.request_id)
                        done[out.request_id] = out
                        generated += sum(len(c.token_ids) for c in out.outputs)
                        bar.set_postfix_str(f"{generated / (time.perf_counter() - start):.1f} output tok/s")
                        bar.update(1)
        except BaseException:
            engine.abort_request(sorted(pending))  # leave the engine clean for the next call
            raise
        finally:
            bar.close()
        return [done[rid] for rid in ids]


def _as_prompt_list(prompts: Any) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, (list, tuple)):
        if not prompts:
            raise ValueError("prompts is empty; give at least one prompt")
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
            return [list(prompts)]  # one prompt given as token ids
        return list(prompts)
    raise ValueError(f"prompts must be a string, a list of token ids, or a list of prompts, got {type(prompts).__name__}")


def _per_prompt(params: Any, count: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    if isinstance(params, (list, tuple)):
        if len(params) != count:
            raise ValueError(f"got {len(params)} SamplingParams for {count} prompts; give one, or one per prompt")
        for p in params:
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params must hold SamplingParams, got {type(p).__name__}")
        return list(params)
    raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(params).__name__}")
