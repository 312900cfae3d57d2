"""The prompt text a transformers causal LM is given for one user turn (shared by the agent,
the constrained decoder and the LLM judge)."""

from __future__ import annotations

from typing import Any


def user_turn(tokenizer: Any, content: str, *, plain_suffix: str = "") -> str:
    """``content`` as one user turn through the tokenizer's chat template, ready for the
    assistant's reply; a tokenizer without a chat template gets ``content + plain_suffix``."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
    return content + plain_suffix
