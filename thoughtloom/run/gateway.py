"""The one place a run's gateway is built: the budgeted front door over a composed backend chain."""

from __future__ import annotations

from collections.abc import Callable

from ..llm.budget import BudgetLimits, Pricing
from ..llm.cache import MemoryCache
from ..llm.gateway import Gateway, RetryPolicy
from ..llm.types import Backend, capabilities_of


def build_gateway(
    backend: Backend,
    budget: BudgetLimits | None = None,
    *,
    concurrency: int = 8,
    pricing: Pricing | None = None,
    retry: RetryPolicy | None = None,
) -> Gateway:
    """A gateway with a fresh budget and response cache over `backend` (its own pricing unless given,
    and its roles' models' prices when some roles run on models of their own)."""
    declared = capabilities_of(backend)
    return Gateway(backend, budget, concurrency=concurrency, cache=MemoryCache(), retry=retry,
                   pricing=pricing or declared.pricing, route_pricing=dict(declared.route_pricing))


def make_gateway(
    model: str | Backend = "local",
    budget: BudgetLimits | None = None,
    *,
    concurrency: int = 8,
    pricing: Pricing | None = None,
    progress: Callable[[str], None] | None = None,
) -> Gateway:
    """A gateway over the model named by a spec string (see thoughtloom.llm.registry) or a Backend."""
    if isinstance(model, str):
        from ..llm.registry import make_backend

        backend = make_backend(model, pricing=pricing, progress=progress)
    else:
        backend = model
    return build_gateway(backend, budget, concurrency=concurrency, pricing=pricing)
