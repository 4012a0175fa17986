"""Answers as a reader wants them: without the label a prompt's cue or the model put before them."""

from __future__ import annotations

import re

_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:)\s*", re.IGNORECASE)


def unlabelled(answer: str | None) -> str | None:
    """An answer without its leading labels ("Answer: 16" and "Final answer: Final answer: 16" are "16");
    as given when nothing would be left."""
    if answer is None:
        return None
    rest = answer
    while (stripped := _LABEL.sub("", rest, count=1)) != rest:
        rest = stripped
    return rest if rest.strip() else answer
