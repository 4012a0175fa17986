"""Text from outside made valid Unicode where it enters.

JSON can escape a lone surrogate (`"\\ud800"`), and Python decodes it into a str that no UTF-8
encoder accepts: a server's reply or error, a tool's output, or a JSON object a model writes would
then fail wherever the run stores, prints or sends it. Every such text passes through `valid_text`
(or `valid_value`, for decoded JSON) where it enters, so everything past that point is valid.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodes(text: str) -> bool:
    """True when `text` encodes to UTF-8: no lone surrogate (a JSON escape, or an undecodable byte of a file name)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def valid_text(text: str, source: str | None = None) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (a pair is joined into its character);
    a warning names `source` when something was replaced."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # UTF-16 with surrogatepass joins a high and low surrogate back into one character; what is
    # left alone cannot be decoded and becomes U+FFFD.
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if source is not None:
        logger.warning("%s sent text that is not valid Unicode (lone surrogates); replaced them with U+FFFD", source)
    return fixed


def valid_value(value: Any, source: str | None = None) -> Any:
    """Decoded JSON with every string, keys included, made valid by `valid_text`."""
    if isinstance(value, str):
        return valid_text(value, source)
    if isinstance(value, list):
        return [valid_value(v, source) for v in value]
    if isinstance(value, dict):
        return {valid_text(k, source): valid_value(v, source) for k, v in value.items()}
    return value


def loads_valid(text: str, source: str | None = "JSON in a model's reply") -> Any:
    """`json.loads(text)` with every string made valid (see valid_value); raises what json.loads raises."""
    return valid_value(json.loads(text), source)
