"""Tools the agent may call: one protocol, typed arguments checked before the call, results as data.

A `Tool` has a `ToolSpec` (name, description, JSON Schema of its arguments) and an async `call`.
Tools are never called directly by the agent: the `Toolbox` validates the arguments against the
schema, runs the call under a timeout and a concurrency limit, caps the output, and turns every
outcome (success, a tool's own error, a timeout, bad arguments, an unknown tool) into a
`ToolResult`. A tool call never raises into the run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


class ToolError(Exception):
    """A tool could not do what it was asked (bad input it detected, a failure it reports)."""


class ToolConfigError(ValueError):
    """A tool or tool set that cannot be set up as configured (unknown name, missing folder, bad MCP config)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a tool is called, what it does, and the JSON Schema of its arguments (an object schema)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (the shape of an OpenAI function definition's fields)."""
        return asdict(self)


@runtime_checkable
class Tool(Protocol):
    """Something the agent can call with JSON arguments and get text back."""

    @property
    def spec(self) -> ToolSpec:
        """The tool's name, description and argument schema."""
        ...

    async def call(self, args: dict[str, Any]) -> str:
        """Do the work; raise ToolError for a failure the tool can explain."""
        ...


def canonical_args(args: dict[str, Any]) -> str:
    """Arguments as one canonical JSON string (sorted keys): the key a recorded call is found by."""
    return json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One tool call as it happened: what was asked, what came back, and how it ended.

    status: "ok", "error" (the tool failed), "invalid" (arguments refused before the call),
    "unknown_tool", "timeout", "refused" (replay: not in the record, or no such tool granted).
    """

    tool: str
    args: dict[str, Any]
    status: str
    output: str = ""
    error: str | None = None
    truncated: bool = False
    elapsed_s: float = 0.0
    replayed: bool = False

    @property
    def ok(self) -> bool:
        """True when the tool answered."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, as kept on the graph node that made the call (without `replayed`)."""
        out = {"tool": self.tool, "args": self.args, "status": self.status, "output": self.output,
               "error": self.error, "truncated": self.truncated, "elapsed_s": self.elapsed_s}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        """Rebuild a recorded call."""
        return cls(tool=str(data["tool"]), args=dict(data.get("args") or {}), status=str(data["status"]),
                   output=str(data.get("output") or ""), error=data.get("error"),
                   truncated=bool(data.get("truncated")), elapsed_s=float(data.get("elapsed_s") or 0.0))

    def for_model(self) -> str:
        """What the model is shown of the call's outcome."""
        if self.ok:
            return self.output + (" [output cut]" if self.truncated else "")
        return f"{self.status}: {self.error}"
