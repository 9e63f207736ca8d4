"""Chat prompts: render a conversation with the model's chat template."""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]

_ROLES = ("system", "user", "assistant", "tool", "developer")


def validate_messages(messages: Any) -> list[Message]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content', got {m!r}")
        if m["role"] not in _ROLES:
            raise ValueError(f"messages[{i}]['role'] must be one of {', '.join(_ROLES)}, got {m['role']!r}")
    return messages


def render_chat(tokenizer: Any, messages: list[Message], add_generation_prompt: bool = True,
                chat_template: str | None = None) -> str:
    """The prompt text for ``messages``; the template adds any BOS itself."""
    validate_messages(messages)
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError("this model's tokenizer has no chat template; pass chat_template=... or use generate()")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         chat_template=chat_template)
