"""Errors raised by model access. Each message says what went wrong and what to do."""

from __future__ import annotations


class ModelError(Exception):
    """A model call failed in a way retrying will not fix."""


class TransientModelError(ModelError):
    """A model call failed in a way that may pass on retry (timeout, 429, 5xx)."""


class ModelUnreachable(ModelError):
    """The model endpoint could not be reached at all."""


class ModelConfigError(ModelError):
    """The model is misconfigured: unknown spec, missing key, missing weights or extra."""


class BudgetExceeded(Exception):
    """A call would have crossed a hard budget limit, so it was not made."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        #: Which limit: "tokens", "calls", "cost_usd" or "wall_s".
        self.limit = limit
