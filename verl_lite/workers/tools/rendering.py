"""Chat messages to token ids through the chat template, so that a conversation only ever grows by appending.

Agent loops keep the model's sampled ids as they are and add the tokens of the messages that follow them
(tool results, a user's reply) as the chat template renders those messages after an assistant turn: the
difference between a short conversation rendered with and without them. No sampled token is re-tokenized.
"""

from __future__ import annotations

from typing import Any

# The conversation appended messages are rendered after (only the delta is kept).
_DELTA_BASE = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}]


class ChatRenderer:
    """Renders prompts and appended messages with one tokenizer's (or a given) chat template.

    Args:
        tokenizer: a Hugging Face tokenizer (``apply_chat_template``, ``encode``, ``eos_token_id``).
        chat_template: the template used instead of the tokenizer's own (None = the tokenizer's).
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self._base_ids = self.encode(self.render(_DELTA_BASE, add_generation_prompt=False))

    def prompt_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """``messages`` rendered with the ``tools`` schemas and the generation prompt of the next assistant turn."""
        return self.encode(self.render(messages, add_generation_prompt=True, tools=tools))

    def appended_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Tokens of ``messages`` (and the next generation prompt) when they follow an assistant turn.

        The model's turn ends with its EOS; whatever the template writes after an assistant message's EOS
        (e.g. a newline) belongs to the appended messages, so the delta is taken from just after that EOS.

        Raises:
            ValueError: the template renders earlier turns differently once ``messages`` follow them.
        """
        full = self.encode(self.render(_DELTA_BASE + list(messages), add_generation_prompt=True))
        cut = _after_last(self._base_ids, self.tokenizer.eos_token_id)
        if full[:cut] != self._base_ids[:cut]:
            raise ValueError(
                "the chat template renders earlier turns differently once later messages follow them, so "
                "messages cannot be appended token by token; use a template that only appends (e.g. "
                "verl_lite.workers.tools.TOOL_CHAT_TEMPLATE)."
            )
        return full[cut:]

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, tools=None) -> str:
        """The template's text of ``messages``."""
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added: the template writes them)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _after_last(ids: list[int], token_id: int | None) -> int:
    """The index just after the last ``token_id`` in ``ids`` (``len(ids)`` when it does not occur)."""
    for i in range(len(ids) - 1, -1, -1):
        if ids[i] == token_id:
            return i + 1
    return len(ids)


__all__ = ["ChatRenderer"]
