"""Tool calls as OpenTelemetry `execute_tool` spans (GenAI semantic conventions), when the `otel` extra is installed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..llm.tracing import enabled, span
from .base import Tool, ToolSpec


class TracedTool:
    """A tool whose every run is an `execute_tool` span (GenAI conventions); answers are the tool's own."""

    def __init__(self, inner: Tool) -> None:
        self.inner = inner

    @property
    def spec(self) -> ToolSpec:
        """The wrapped tool's spec."""
        return self.inner.spec

    async def call(self, args: dict[str, Any]) -> str:
        """Run the wrapped tool inside a span."""
        name = self.inner.spec.name
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.type": "function"}
        with span(f"execute_tool {name}", attributes):
            return await self.inner.call(args)


def traced_tools(tools: Sequence[Tool]) -> list[Tool]:
    """Each tool in a TracedTool when OpenTelemetry is installed; else the tools themselves."""
    return [TracedTool(t) for t in tools] if enabled() else list(tools)
