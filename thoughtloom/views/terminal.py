"""Text from a model or a program made safe to show on a terminal.

A model's reply or a sandboxed program's output can hold escape sequences that clear the screen,
retitle the window, plant hyperlinks (OSC 8) or reorder what the reader sees (bidi overrides).
Every place that prints such text passes it through `terminal_text` first.
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0 controls but tab and newline, DEL and C1 (which many terminals still obey: U+009B is CSI),
# bidi embeddings, overrides, isolates and marks, the Unicode line and paragraph separators, and
# lone surrogates (undecodable bytes under surrogateescape, which cannot be encoded for output).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_OR_NEWLINE = re.compile(f"[\n{_UNSAFE.pattern[1:-1]}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0A:
        return "\\n"
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as surrogateescape keeps it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str, *, newlines: bool = False) -> str:
    """`text` with every control, bidi and undecodable character shown as an escape (\\x1b, \\u202e, \\xff).

    newlines=True keeps line breaks (for multi-line output such as a program); otherwise they are
    shown as \\n, so the result is always one line.
    """
    return (_UNSAFE if newlines else _UNSAFE_OR_NEWLINE).sub(_visible, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def terminal_json(value: Any, **options: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, **options)` with what json leaves raw (DEL, C1, bidi,
    lone surrogates) written as \\uXXXX escapes: the same JSON, safe to print."""
    # json.dumps escapes C0 controls inside strings itself and emits newlines only between tokens,
    # so every character matched here is inside a string, where \uXXXX means the same character.
    return _UNSAFE.sub(_json_escape, json.dumps(value, ensure_ascii=False, **options))
