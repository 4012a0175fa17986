"""What an HTTP model API's failure means for the user: the shared part of the SDK backends' error mapping.

The OpenAI-compatible and Anthropic backends talk to different SDKs, but an HTTP status from a model
endpoint means the same to both: a key to fix, a model name to check, a wait (honouring
Retry-After), or a request to change. Each backend maps its SDK's exceptions to a status and a
message, and this module turns that into thoughtloom's one-line error.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ModelConfigError, ModelError, TransientModelError
from .retry_after import retry_after_from_headers
from .text import valid_text

# Statuses worth retrying; the same set the SDKs themselves would retry (408 request timeout,
# 409 lock timeout, 429 rate limit, 5xx, Anthropic's 529 overloaded among them).
TRANSIENT_STATUSES = frozenset({408, 409, 429})
# Server error text quoted in our messages is cut to this many characters to keep them one line.
MAX_QUOTE = 200
# A dead host should fail fast even when generation may legitimately take minutes.
MAX_CONNECT_TIMEOUT_S = 10.0


def one_line(text: object) -> str:
    """Server text squeezed onto one short valid line, for quoting inside an error message."""
    flat = " ".join(valid_text(str(text)).split())
    return flat if len(flat) <= MAX_QUOTE else flat[: MAX_QUOTE - 3] + "..."


def status_error(where: str, status: int, said: str, headers: Mapping[str, str], key_env: str | None,
                 not_found_hint: str) -> ModelError:
    """The error for an HTTP error status from the model endpoint `where`; `said` quotes the server."""
    if status in (401, 403):
        key_hint = f"set {key_env} to a valid key" if key_env else "check the API key"
        return ModelConfigError(f"model endpoint {where} rejected the API key ({said}); {key_hint}")
    if status == 404:
        return ModelConfigError(f"model endpoint {where} answered 404 ({said}); {not_found_hint}")
    if status in TRANSIENT_STATUSES or status >= 500:
        wait = retry_after_from_headers(headers)
        asks = f"; the server asks to wait {wait:g}s" if wait is not None else ""
        return TransientModelError(f"model endpoint {where} failed ({said}); retrying may help{asks}",
                                   retry_after_s=wait)
    return ModelError(f"model endpoint {where} refused the request ({said}); check the request settings")
