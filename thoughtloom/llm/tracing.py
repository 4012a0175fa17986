"""OpenTelemetry spans for searches and model calls (tool calls: tools/traced.py), named and attributed by the GenAI
semantic conventions.

Optional: with the `otel` extra installed (opentelemetry-api, opentelemetry-sdk), runs are built
with these wrappers and the spans go to the application's TracerProvider (none set: OTel's
no-op); without it `enabled()` is False and nothing is wrapped. Span attributes hold names and
counts, never prompts or replies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from .types import Backend, Completion, GenerateRequest, capabilities_of
from .wrapper import BackendWrapper

try:
    from opentelemetry import trace
    from opentelemetry.trace import StatusCode
except ImportError:  # the optional extra is not installed: nothing is traced
    trace = None  # type: ignore[assignment]

#: The instrumentation scope every span carries.
SCOPE = "thoughtloom"


def enabled() -> bool:
    """Whether OpenTelemetry is installed (the `otel` extra), so runs are built with spans."""
    return trace is not None


@contextmanager
def span(name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """A current span (a no-op context without OpenTelemetry); an exception marks it failed with `error.type`."""
    if trace is None:
        with nullcontext(None) as nothing:
            yield nothing
        return
    from .._version import __version__

    tracer = trace.get_tracer(SCOPE, __version__)
    with tracer.start_as_current_span(name, attributes=dict(attributes), record_exception=False,
                                      set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__qualname__)
            current.set_status(StatusCode.ERROR, str(exc)[:200])
            raise


def model_of(backend_name: str) -> tuple[str, str]:
    """(provider, model) from a backend's name: "openai-compatible:URL@m#completions" -> ("openai-compatible", "m")."""
    provider, _, rest = backend_name.partition(":")
    model = rest.rsplit("@", 1)[-1] if "@" in rest else rest
    return provider, model.split("#", 1)[0] or backend_name


class TracedBackend(BackendWrapper):
    """A span per model call (a batch: one span for the one wire call), by the GenAI conventions."""

    def _attributes(self, request: GenerateRequest) -> dict[str, Any]:
        provider, model = model_of(self.inner.name)
        form = request.form or capabilities_of(self.inner).prompt_form or "text"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat" if form == "chat" else "text_completion",
            "gen_ai.provider.name": provider, "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": request.max_tokens, "gen_ai.request.temperature": request.temperature,
            "gen_ai.request.choice.count": request.n,
        }
        if request.seed is not None:
            attributes["gen_ai.request.seed"] = request.seed
        if request.purpose:
            attributes["thoughtloom.purpose"] = request.purpose
        return attributes

    async def generate(self, request: GenerateRequest) -> Completion:
        """The wrapped backend's answer, inside a span with its usage and finish reasons."""
        attributes = self._attributes(request)
        with span(f"{attributes['gen_ai.operation.name']} {attributes['gen_ai.request.model']}", attributes) as s:
            completion = await self.inner.generate(request)
            _record(s, [completion])
            return completion

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """The wrapped backend's answers to a batch, inside one span (the usage summed)."""
        attributes = {**self._attributes(requests[0]), "thoughtloom.batch_size": len(requests)}
        with span(f"{attributes['gen_ai.operation.name']} {attributes['gen_ai.request.model']}", attributes) as s:
            completions = await self.inner.generate_batch(requests)  # type: ignore[attr-defined]
            _record(s, completions)
            return completions


def _record(current: Any, completions: Sequence[Completion]) -> None:
    """Usage, the answering model and finish reasons on a model call's span."""
    if current is None:
        return
    current.set_attribute("gen_ai.usage.input_tokens", sum(c.usage.input_tokens for c in completions))
    current.set_attribute("gen_ai.usage.output_tokens", sum(c.usage.output_tokens for c in completions))
    if completions and completions[0].model:
        current.set_attribute("gen_ai.response.model", model_of(completions[0].model)[1])
    reasons = [r for c in completions for r in (c.finish_reasons or ())]
    if reasons:
        current.set_attribute("gen_ai.response.finish_reasons", reasons)


def traced(backend: Backend) -> Backend:
    """`backend` with a span per call when OpenTelemetry is installed; else `backend` itself."""
    return TracedBackend(backend) if enabled() else backend


def search_attributes(task: str, strategy: str) -> dict[str, Any]:
    """A search's span attributes at its start (the search is the agent invocation of the conventions)."""
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"thoughtloom {strategy}",
            "thoughtloom.task": task, "thoughtloom.strategy": strategy}

