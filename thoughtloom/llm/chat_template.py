"""A GGUF's own chat template (`tokenizer.chat_template`, Jinja) turned into prompt pieces.

The template comes from a model file and message contents come from users, tasks and earlier
model replies, so neither is trusted: the template runs in Jinja's immutable sandbox, and the
contents are kept apart from the template's own text so that a message containing `<|im_end|>`
is tokenized as plain text, never as the control token that ends a turn.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ModelConfigError, ModelError
from .types import Message


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of prompt text: template text (special tokens parsed) or message content (never parsed)."""

    text: str
    special: bool


class ChatTemplate:
    """Renders chat messages with a model's Jinja chat template, ending with the assistant's turn."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ModelConfigError(f"the model's chat template does not compile: {exc}") from None
        self._error = TemplateError
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[Message]) -> str:
        """The whole prompt as one string (for display and token counts of trusted text)."""
        return "".join(p.text for p in self.pieces(messages))

    def pieces(self, messages: Sequence[Message]) -> list[Piece]:
        """The prompt as template pieces and content pieces, in order."""
        # Each content is rendered as a random marker, then put back as its own piece. A template
        # that alters contents (trims them, say) loses its marker: then the text is rendered for
        # real and treated as one template piece, which is what llama.cpp's own server does.
        marks = [f"\x02{secrets.token_hex(8)}\x03" for _ in messages]
        marked = self._render([Message(m.role, mark) for m, mark in zip(messages, marks, strict=True)])
        out: list[Piece] = []
        rest = marked
        for message, mark in zip(messages, marks, strict=True):
            before, found, after = rest.partition(mark)
            if not found:
                return [Piece(self._render(messages), True)]
            if before:
                out.append(Piece(before, True))
            if message.content:
                out.append(Piece(message.content, False))
            rest = after
        if rest:
            out.append(Piece(rest, True))
        return out

    def _render(self, messages: Sequence[Message]) -> str:
        try:
            return self._template.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=True, bos_token=self.bos_token, eos_token=self.eos_token, tools=None,
            )
        except self._error as exc:
            raise ModelError(f"the model's chat template refused the messages: {exc}") from None
