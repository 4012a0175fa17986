"""Read a server's Retry-After header (RFC 9110: delay-seconds or an HTTP-date) as a capped wait."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

#: The longest wait a server can impose on one retry: a misconfigured or hostile server asking for
#: an hour must not stall a search (the gateway gives up after its attempts instead).
MAX_RETRY_AFTER_S = 60.0


def retry_after_seconds(value: str | None, now: datetime | None = None, cap: float = MAX_RETRY_AFTER_S) -> float | None:
    """Seconds to wait that a Retry-After value asks for, at most `cap`; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is always GMT
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), cap)


def retry_after_from_headers(headers: Mapping[str, str] | None, cap: float = MAX_RETRY_AFTER_S) -> float | None:
    """The capped Retry-After wait in a response's headers (case-insensitive lookup), or None."""
    if headers is None:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    return retry_after_seconds(value, cap=cap)
