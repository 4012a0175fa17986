"""A hard budget: tokens, calls, dollars and wall-clock, reserved before each call."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .errors import BudgetExceeded
from .types import Usage


@dataclass(frozen=True, slots=True)
class Pricing:
    """Dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollar cost of so many tokens."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


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
        self.spent = Usage()
        self.calls = 0
        self.cost_usd = 0.0
        self.reserved_tokens = 0
        self.reserved_cost = 0.0
        self.in_flight = 0
        # Tokens set aside for a later step (the final synthesis call) that searching may not use.
        self.held_tokens = 0
        #: What requests routed to a role's own model were charged, by role (the rest went to the run's model).
        self.routes: dict[str, Spend] = {}

    # --- views --------------------------------------------------------------------------

    @property
    def elapsed_s(self) -> float:
        """Seconds since the budget started."""
        return self._clock() - self.started_at

    def tokens_left(self) -> int | None:
        """Tokens neither spent nor reserved; None when unlimited."""
        if self.limits.tokens is None:
            return None
        return self.limits.tokens - self.spent.total - self.reserved_tokens - self.held_tokens

    def wall_left(self) -> float | None:
        """Seconds left before the wall-clock limit; None when unlimited."""
        if self.limits.wall_s is None:
            return None
        return self.limits.wall_s - self.elapsed_s

    def exhausted(self) -> str | None:
        """The name of a limit already reached, or None."""
        lim = self.limits
        if lim.tokens is not None and self.spent.total >= lim.tokens:
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
        lim = self.limits
        if lim.wall_s is not None and self.elapsed_s >= lim.wall_s:
            raise BudgetExceeded("wall_s", f"wall-clock budget of {lim.wall_s:g}s is used up")
        if lim.calls is not None and self.calls + self.in_flight >= lim.calls:
            raise BudgetExceeded("calls", f"call budget of {lim.calls} is used up")
        left = self.tokens_left()
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
        return Reservation(tokens, cost_usd, route=route)

    def settle(self, reservation: Reservation, usage: Usage | None, cost_usd: float = 0.0) -> None:
        """Replace a reservation by what the call really used (None: the call never ran)."""
        if reservation.settled:
            return
        reservation.settled = True
        self.reserved_tokens -= reservation.tokens
        self.reserved_cost -= reservation.cost_usd
        self.in_flight -= 1
        if usage is not None:
            self.spent = self.spent + usage
            self.calls += 1
            self.cost_usd += cost_usd
            route = reservation.route
            if route is not None:  # unrouted calls are the totals less the routed ones: nothing to add per call
                self.routes[route] = self.routes.get(route, _NOTHING).add(usage, cost_usd)

    def hold(self, tokens: int) -> None:
        """Set tokens aside so that ordinary calls cannot use them (see release_hold)."""
        left = self.tokens_left()
        self.held_tokens += tokens if left is None else max(0, min(tokens, left))

    def release_hold(self) -> None:
        """Make held tokens spendable again."""
        self.held_tokens = 0

    def raise_limit(self, extra_tokens: int) -> None:
        """Raise the token limit by exactly extra_tokens (an approved budget increase)."""
        if extra_tokens <= 0:
            raise ValueError(f"extra_tokens must be positive, got {extra_tokens}")
        if self.limits.tokens is None:
            return
        self.limits = BudgetLimits(
            tokens=self.limits.tokens + extra_tokens,
            calls=self.limits.calls,
            cost_usd=self.limits.cost_usd,
            wall_s=self.limits.wall_s,
        )
