"""A backend that sends each request to the model its route names: the run's model, or a role's own.

Composed at the bottom of a run's backend chain (see thoughtloom.run.execute) when a role (the
search operators' generator, evaluator or synthesizer; the research flow's brancher, evaluator or
synthesizer) runs on a model of its own, so those calls still pass the run's limits, record,
replay and budget like every other. The gateway prices each call at its own model's price
(`route_pricing`), so a dollar budget stays hard and each role's cost is its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace

from .errors import ModelConfigError
from .types import Backend, Capabilities, Completion, GenerateRequest, Prompt, capabilities_of
from .wrapper import BackendWrapper


def routed_capabilities(run: Capabilities, roles: Mapping[str, Capabilities]) -> Capabilities:
    """What a run whose roles may go to other models can ask of every one of them."""
    every = (run, *roles.values())
    # One form when every model reads the same; else None, so that the gateway bounds an
    # uncounted prompt by the larger of its forms, whichever model reads it.
    forms = {c.prompt_form for c in every}
    return replace(
        run,
        prompt_form=forms.pop() if len(forms) == 1 else None,
        # A distribution (or a call, a stream) can be asked for only if every model can give one.
        scores_choices=all(c.scores_choices for c in every),
        follows_choices=all(c.follows_choices for c in every),
        native_tools=all(c.native_tools for c in every),
        streams=all(c.streams for c in every),
        # `pricing` is the run's model's; each role's own model has its own price.
        route_pricing=tuple((role, c.pricing) for role, c in roles.items()),
    )


class RoutedBackend(BackendWrapper):
    """The run's model for unrouted requests; `routes[request.route]` for the others."""

    def __init__(self, inner: Backend, routes: Mapping[str, Backend]) -> None:
        super().__init__(inner)
        self.routes = dict(routes)
        self.capabilities = routed_capabilities(capabilities_of(inner),
                                                {role: capabilities_of(b) for role, b in self.routes.items()})

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
        """None: the request's model (and so its tokenizer) is not known here, so the gateway bounds the prompt by its
        bytes."""
        return None

    async def aclose(self) -> None:
        """Close the run's model and every role's model."""
        try:
            await self.inner.aclose()
        finally:
            for backend in self.routes.values():
                await backend.aclose()
