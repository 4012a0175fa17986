"""Errors raised by model access. Each message says what went wrong and what to do."""

from __future__ import annotations

from .types import Usage


class ModelError(Exception):
    """A model call failed in a way retrying will not fix."""

    #: The reply had begun to arrive (a stream) when the call failed: the server may have generated every
    #: token, so the request is charged in full, like one that got no answer (see `cut_short`).
    cut_short: bool = False


def cut_short(error: ModelError) -> ModelError:
    """`error`, marked as ending a reply that had begun to arrive (see ModelError.cut_short)."""
    error.cut_short = True
    return error


class TransientModelError(ModelError):
    """A model call failed in a way that may pass on retry (timeout, 429, 5xx)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        #: How long the server asked us to wait (its Retry-After header), if it said; already capped.
        self.retry_after_s = retry_after_s


class ModelTimeout(TransientModelError):
    """A request got no answer in time; the server may have generated it all, so it is charged in full."""


class BatchRefused(ModelError):
    """The server cannot answer a list of prompts in one request; send the requests one by one."""

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        #: What the refused request cost when the server answered it anyway (wrongly).
        self.usage = usage


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
