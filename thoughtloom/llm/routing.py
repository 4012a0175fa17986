"""A backend that sends each request to the model its route names: the run's model, or a role's own.

Composed at the bottom of a run's backend chain (see thoughtloom.run.execute) when a role (the
research flow's brancher, evaluator or synthesizer) runs on a model of its own, so those calls
still pass the run's limits, record, replay and budget like every other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from .budget import Pricing
from .errors import ModelConfigError
from .types import Backend, Completion, GenerateRequest, Prompt
from .wrapper import BackendWrapper


def dearest(prices: Iterable[Pricing | None]) -> Pricing | None:
    """The highest input and output prices among the known ones: the gateway prices every call at
    this, an upper bound, so a dollar budget stays hard whichever model a call goes to."""
    known = [p for p in prices if p is not None]
    if not known:
        return None
    return Pricing(max(p.input_per_mtok for p in known), max(p.output_per_mtok for p in known))


class RoutedBackend(BackendWrapper):
    """The run's model for unrouted requests; `routes[request.route]` for the others."""

    def __init__(self, inner: Backend, routes: Mapping[str, Backend]) -> None:
        super().__init__(inner)
        self.routes = dict(routes)
        # Safe to run eagerly only if every model it may call is.
        self.eager_safe = all(getattr(b, "eager_safe", False) for b in (inner, *self.routes.values()))
        # A distribution can be asked for only if every model can give one.
        self.scores_choices = all(getattr(b, "scores_choices", False) for b in (inner, *self.routes.values()))
        self.follows_choices = all(getattr(b, "follows_choices", False) for b in (inner, *self.routes.values()))
        self.pricing = dearest(getattr(b, "pricing", None) for b in (inner, *self.routes.values()))

    def _backend(self, request: GenerateRequest) -> Backend:
        if request.route is None:
            return self.inner
        try:
            return self.routes[request.route]
        except KeyError:
            raise ModelConfigError(f"no model is set for role {request.route!r}") from None

    async def generate(self, request: GenerateRequest) -> Completion:
        """The routed model's answer."""
        return await self._backend(request).generate(request)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """One batch when every request goes to the run's model; else each request to its own model."""
        if all(r.route is None for r in requests) and getattr(self.inner, "supports_batch", False):
            return await self.inner.generate_batch(requests)  # type: ignore[attr-defined]
        return list(await asyncio.gather(*(self.generate(r) for r in requests)))

    def count_tokens(self, prompt: Prompt) -> int | None:
        """None: the request's model (and so its tokenizer) is not known here, so the gateway bounds the prompt by its bytes."""
        return None

    async def aclose(self) -> None:
        """Close the run's model and every role's model."""
        try:
            await self.inner.aclose()
        finally:
            for backend in self.routes.values():
                await backend.aclose()
