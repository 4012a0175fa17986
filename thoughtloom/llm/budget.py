"""A hard budget: tokens, calls, dollars and wall-clock, reserved before each call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

from .errors import BudgetExceeded
from .types import Pricing, Usage

T = TypeVar("T")

#: The budget's limits by the names BudgetExceeded uses.
LIMIT_NAMES: tuple[str, ...] = ("tokens", "calls", "cost_usd", "wall_s")

#: UTF-8 bytes per token of ordinary text for the tokenizers we meet: the estimate where no count is known.
BYTES_PER_TOKEN = 4
#: The most UTF-8 bytes one token holds in the tokenizers we meet. Measured from the vocabularies:
#: Gemma 3 31 (a run of 31 tabs, ten-letter Bengali words), Qwen2.5 32 (runs of 32 `=` or spaces,
#: "AutoresizingMaskIntoConstraints"); larger vocabularies (OpenAI's, Llama 3's) may hold longer runs
#: of one character, and tokens of 96 bytes have been reported in GGUF vocabularies. So no honest count of
#: a text is below its bytes / 128: a server reporting fewer tokens is under-reporting, whatever its
#: tokenizer. The margin is wide on purpose (an honest server must never be overridden): ordinary
#: text is ~4 bytes a token, so a server that reports exactly this floor still under-reports ~30x.
MAX_TOKEN_BYTES = 128


def utf8_size(text: str) -> int:
    """A text's size in UTF-8 bytes; a lone surrogate (a server may send `\\ud800`) counts its 3 bytes, never raises."""
    return len(text.encode("utf-8", "surrogatepass"))


def least_tokens(text: str) -> int:
    """The fewest tokens any tokenizer we meet makes of a text (MAX_TOKEN_BYTES bytes a token, rounded up)."""
    return -(-utf8_size(text) // MAX_TOKEN_BYTES)


def estimate_tokens(text: str) -> int:
    """About how many tokens a text is, without its tokenizer (BYTES_PER_TOKEN bytes a token, never below
    least_tokens: a text of 1-3 bytes is one token)."""
    size = utf8_size(text)
    return max(size // BYTES_PER_TOKEN, -(-size // MAX_TOKEN_BYTES))


#: The price of a model that runs in-process: tokens cost no dollars.
FREE = Pricing(0.0, 0.0)


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Hard limits; None means unlimited."""

    tokens: int | None = None
    calls: int | None = None
    cost_usd: float | None = None
    wall_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "calls", "cost_usd", "wall_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"budget {name} must be positive, got {value}")

    def text(self) -> str:
        """The limits as a person reads them: "20,000 tokens, $0.5", or "no limit"."""
        parts = [f"{self.tokens:,} tokens" if self.tokens is not None else "",
                 f"{self.calls:,} calls" if self.calls is not None else "",
                 f"${self.cost_usd:g}" if self.cost_usd is not None else "",
                 f"{self.wall_s:g} s" if self.wall_s is not None else ""]
        return ", ".join(p for p in parts if p) or "no limit"


@dataclass(slots=True)
class Reservation:
    """What one in-flight call holds against the budget until it settles."""

    tokens: int
    cost_usd: float
    settled: bool = False
    #: The role whose own model the call goes to (None: the run's model).
    route: str | None = None


@dataclass(frozen=True, slots=True)
class Spend:
    """What the requests sent to one model were charged: tokens in and out, requests, dollars."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0

    def add(self, usage: Usage, cost_usd: float) -> Spend:
        """This spend plus one more request's charge."""
        return Spend(self.input_tokens + usage.input_tokens, self.output_tokens + usage.output_tokens,
                     self.calls + 1, self.cost_usd + cost_usd)

    def minus(self, other: Spend) -> Spend:
        """What was spent since `other` (an earlier reading of the same ledger)."""
        return Spend(self.input_tokens - other.input_tokens, self.output_tokens - other.output_tokens,
                     self.calls - other.calls, self.cost_usd - other.cost_usd)


_NOTHING = Spend()


class Budget:
    """The ledger: what is spent, what is reserved by calls in flight, what is left.

    Every call reserves its worst case first (prompt tokens plus n x max_tokens) and settles
    with the real usage afterwards, so concurrent calls can never overshoot a limit together.
    """

    def __init__(self, limits: BudgetLimits | None = None, clock=time.monotonic) -> None:
        self.limits = limits or BudgetLimits()
        self._clock = clock
        self.started_at = clock()
        # What is spent, as two counts: settle adds to them once per request without building a Usage.
        self._spent_in = 0
        self._spent_out = 0
        self._spent_reasoning = 0  # a part of _spent_out, shown apart
        self.calls = 0
        self.cost_usd = 0.0
        self.reserved_tokens = 0
        self.reserved_cost = 0.0
        self.in_flight = 0
        # Tokens set aside for a later step (the final synthesis call) that searching may not use.
        self.held_tokens = 0
        #: What requests routed to a role's own model were charged, by role (the rest went to the run's model).
        self.routes: dict[str, Spend] = {}
        # Seconds the wall clock stood still (see `paused`), and since when it stands (None: running).
        self._paused_s = 0.0
        self._paused_since: float | None = None
        self._pauses = 0

    # --- views --------------------------------------------------------------------------

    @property
    def spent(self) -> Usage:
        """Tokens the settled requests used, in and out."""
        return Usage(self._spent_in, self._spent_out, self._spent_reasoning)

    @property
    def elapsed_s(self) -> float:
        """Seconds the budget's wall clock has run since it started (pauses left out)."""
        now = self._clock()
        stood = self._paused_s + (now - self._paused_since if self._paused_since is not None else 0.0)
        return now - self.started_at - stood

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the wall clock while the search waits on a person's answer (nested pauses count once)."""
        if self._pauses == 0:
            self._paused_since = self._clock()
        self._pauses += 1
        try:
            yield
        finally:
            self._pauses -= 1
            if self._pauses == 0 and self._paused_since is not None:
                self._paused_s += self._clock() - self._paused_since
                self._paused_since = None

    def spent_of(self, limit: str) -> float:
        """What is used of one limit (by its LIMIT_NAMES name): tokens, calls, dollars or seconds."""
        if limit == "tokens":
            return self.spent.total
        if limit == "calls":
            return self.calls
        if limit == "cost_usd":
            return self.cost_usd
        if limit == "wall_s":
            return self.elapsed_s
        raise ValueError(f"no budget limit {limit!r}; the limits are {', '.join(LIMIT_NAMES)}")

    def left_of(self, limit: str) -> float | None:
        """What is left of one limit, counting what calls in flight hold; None when it is unlimited."""
        if limit == "tokens":
            return self.tokens_left()
        if limit == "wall_s":
            return self.wall_left()
        bound = getattr(self.limits, limit)
        if bound is None:
            return None
        if limit == "calls":
            return bound - self.calls - self.in_flight
        return bound - self.cost_usd - self.reserved_cost

    def tokens_left(self) -> int | None:
        """Tokens neither spent nor reserved; None when unlimited."""
        if self.limits.tokens is None:
            return None
        return self.limits.tokens - self._spent_in - self._spent_out - self.reserved_tokens - self.held_tokens

    def wall_left(self) -> float | None:
        """Seconds left before the wall-clock limit; None when unlimited."""
        if self.limits.wall_s is None:
            return None
        return self.limits.wall_s - self.elapsed_s

    def exhausted(self) -> str | None:
        """The name of a limit already reached, or None."""
        lim = self.limits
        if lim.tokens is not None and self._spent_in + self._spent_out >= lim.tokens:
            return "tokens"
        if lim.calls is not None and self.calls >= lim.calls:
            return "calls"
        if lim.cost_usd is not None and self.cost_usd >= lim.cost_usd:
            return "cost_usd"
        if lim.wall_s is not None and self.elapsed_s >= lim.wall_s:
            return "wall_s"
        return None

    # --- reserve and settle -------------------------------------------------------------

    def reserve(self, tokens: int, cost_usd: float = 0.0, route: str | None = None) -> Reservation:
        """Hold tokens (and dollars) for one call, or raise BudgetExceeded without holding anything.

        route: the role whose own model the call goes to; its charge is also counted under that role.
        """
        self.claim(tokens, cost_usd)
        return Reservation(tokens, cost_usd, False, route)

    def settle(self, reservation: Reservation, usage: Usage | None, cost_usd: float = 0.0) -> None:
        """Replace a reservation by what the call really used (None: the call never ran)."""
        if reservation.settled:
            return
        reservation.settled = True
        self.charge(reservation.tokens, reservation.cost_usd, reservation.route, usage, cost_usd)

    def claim(self, tokens: int, cost_usd: float = 0.0) -> None:
        """`reserve` without the Reservation: for a caller that settles the claim itself, exactly
        once, with `charge` (the gateway's single calls: an object per call is their cost)."""
        lim = self.limits
        if lim.wall_s is not None and self.elapsed_s >= lim.wall_s:
            raise BudgetExceeded("wall_s", f"wall-clock budget of {lim.wall_s:g}s is used up")
        if lim.calls is not None and self.calls + self.in_flight >= lim.calls:
            raise BudgetExceeded("calls", f"call budget of {lim.calls} is used up")
        left = None if lim.tokens is None else self.tokens_left()
        if left is not None and tokens > left:
            raise BudgetExceeded(
                "tokens",
                f"a call needing up to {tokens} tokens does not fit in the {max(left, 0)} "
                f"left of the {lim.tokens}-token budget",
            )
        if lim.cost_usd is not None and self.cost_usd + self.reserved_cost + cost_usd > lim.cost_usd:
            raise BudgetExceeded("cost_usd", f"dollar budget of ${lim.cost_usd:g} would be exceeded")
        self.reserved_tokens += tokens
        self.reserved_cost += cost_usd
        self.in_flight += 1

    def charge(self, tokens: int, reserved_cost: float, route: str | None, usage: Usage | None,
               cost_usd: float = 0.0) -> None:
        """Settle a claim of `tokens` and `reserved_cost` by what the call really used (None: it never ran)."""
        self.reserved_tokens -= tokens
        self.reserved_cost -= reserved_cost
        self.in_flight -= 1
        if usage is not None:
            self._spent_in += usage.input_tokens
            self._spent_out += usage.output_tokens
            self._spent_reasoning += usage.reasoning_tokens
            self.calls += 1
            self.cost_usd += cost_usd
            if route is not None:  # unrouted calls are the totals less the routed ones: nothing to add per call
                self.routes[route] = self.routes.get(route, _NOTHING).add(usage, cost_usd)

    def hold(self, tokens: int) -> None:
        """Set tokens aside so that ordinary calls cannot use them (see release_hold)."""
        left = self.tokens_left()
        self.held_tokens += tokens if left is None else max(0, min(tokens, left))

    def release_hold(self) -> None:
        """Make held tokens spendable again."""
        self.held_tokens = 0

    def raise_limit(self, extra: float, limit: str = "tokens") -> None:
        """Raise one limit (tokens by default) by exactly `extra` (an approved budget increase).

        Tokens and calls are whole numbers; an unlimited limit stays unlimited.
        """
        if extra <= 0:
            raise ValueError(f"the increase must be positive, got {extra}")
        if limit not in LIMIT_NAMES:
            raise ValueError(f"no budget limit {limit!r}; the limits are {', '.join(LIMIT_NAMES)}")
        if limit in ("tokens", "calls") and extra != int(extra):
            raise ValueError(f"{limit} are raised by a whole number, got {extra}")
        current = getattr(self.limits, limit)
        if current is None:
            return
        self.limits = replace(self.limits, **{limit: current + (int(extra) if limit in ("tokens", "calls") else extra)})

    async def within_wall(self, step: Awaitable[T], grace_s: float = 0.0) -> T:
        """Await `step`, cancelled with TimeoutError once the wall-clock budget (plus grace_s) is used up.

        The deadline follows the budget: a limit raised meanwhile, or a paused clock, moves it.
        The step runs in a task of its own, so cancelling it is safe from any caller.
        """
        left = self.wall_left()
        if left is None:
            return await step
        task = asyncio.ensure_future(step)
        try:
            while True:
                done, _ = await asyncio.wait((task,), timeout=max(0.0, left + grace_s))
                if done:
                    return task.result()
                left = self.wall_left()
                if left is None:
                    return await task  # the limit was lifted while waiting: no deadline any more
                if left + grace_s > 0:
                    continue  # raised or paused while waiting: wait for the new deadline
                task.cancel()
                await asyncio.wait((task,))
                if not task.cancelled() and task.exception() is None:
                    return task.result()  # it finished as it was cancelled: keep what it returned
                raise TimeoutError()
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait((task,))
            if not task.cancelled():
                task.exception()  # retrieved: an error it ended with is not "never retrieved"
            raise
