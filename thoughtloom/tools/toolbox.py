"""The Toolbox: the one way a run calls tools (validation, timeout, output cap, concurrency, record, replay).

A run's tool calls are recorded on the graph nodes that made them (`ToolResult.to_dict()` in the
node's `extra["tool_calls"]`); a resumed or replayed run hands those back as `recorded`, and an
identical call (same tool, same canonical arguments) is answered from the record, in the order
the calls were made, before anything runs. A replay has no live tools at all (`live=False`): a
call off the record is refused and counted as `off_record`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..llm.text import valid_text
from .base import Tool, ToolConfigError, ToolError, ToolResult, ToolSpec, canonical_args

logger = logging.getLogger(__name__)

#: The node.extra key a node's tool calls are recorded under (see the module docstring).
TOOL_CALLS: Final = "tool_calls"

#: Seconds one tool call may take before it is cancelled.
DEFAULT_TIMEOUT_S = 30.0
#: Characters of a tool's output kept (and shown to the model); the rest is cut and marked.
DEFAULT_OUTPUT_CAP = 4000
#: Tool calls in flight at once.
DEFAULT_CONCURRENCY = 2


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """How long a call may take, how much output is kept, and how many calls run at once."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    output_cap: int = DEFAULT_OUTPUT_CAP
    concurrency: int = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ToolConfigError(f"tool timeout must be positive; got {self.timeout_s}")
        if self.output_cap < 1 or self.concurrency < 1:
            raise ToolConfigError("tool output cap and concurrency must be at least 1")


def validation_error(schema: dict[str, Any], args: Any) -> str | None:
    """Why `args` does not match the JSON Schema `schema` (one line), or None when it does."""
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, not {type(args).__name__}"
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(args))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


class RecordedTool:
    """A tool as a stored run knew it: its spec only. A replay answers its calls from the record."""

    def __init__(self, spec: ToolSpec) -> None:
        self._spec = spec

    @property
    def spec(self) -> ToolSpec:
        """The recorded spec."""
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        """Never reached in a replay (off-record calls are refused before a tool runs)."""
        raise ToolError(f"{self._spec.name} is not running: this run only replays its recorded calls")


class Toolbox:
    """The tools granted to one run, called only through here."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        limits: ToolLimits = ToolLimits(),
        *,
        recorded: Sequence[ToolResult] = (),
        live: bool = True,
        closers: Sequence[Any] = (),
    ) -> None:
        self.limits = limits
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            name = tool.spec.name
            if name in self._tools:
                raise ToolConfigError(f"two tools are called {name!r}; rename one (MCP tools are 'server.tool')")
            self._tools[name] = tool
        self._recorded: dict[tuple[str, str], deque[ToolResult]] = defaultdict(deque)
        for r in recorded:
            self._recorded[(r.tool, canonical_args(r.args))].append(r)
        self.live = live
        self._closers = list(closers)
        self._slots = asyncio.Semaphore(limits.concurrency)
        #: calls made live, answered from the record, refused before running, and off the record (replay).
        self.live_calls = 0
        self.replayed = 0
        self.invalid = 0
        self.off_record = 0

    @property
    def specs(self) -> list[ToolSpec]:
        """The granted tools' specs, by name."""
        return [self._tools[n].spec for n in sorted(self._tools)]

    @property
    def names(self) -> list[str]:
        """The granted tools' names."""
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def spec(self, name: str) -> ToolSpec | None:
        """One tool's spec, or None if it is not granted."""
        tool = self._tools.get(name)
        return tool.spec if tool is not None else None

    def with_record(self, recorded: Sequence[ToolResult], *, live: bool) -> Toolbox:
        """The same tools answering `recorded` calls first (resume), or only those (replay: live=False)."""
        box = Toolbox(self._tools.values(), self.limits, recorded=recorded, live=live, closers=self._closers)
        self._closers = []  # the new box owns what the tools started
        return box

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Call a tool; every outcome comes back as a ToolResult, never as an exception."""
        result = await self._call(name, args)
        # Names, arguments and errors may come from the model: %r keeps them on one escaped line.
        if result.status == "ok":
            logger.debug("tool %r ok in %.3fs%s, args %r", result.tool, result.elapsed_s,
                         " (replayed)" if result.replayed else "", result.args)
        else:
            logger.info("tool %r %s: %r", result.tool, result.status, result.error)
        return result

    async def _call(self, name: str, args: dict[str, Any]) -> ToolResult:
        queue = self._recorded.get((name, canonical_args(args) if isinstance(args, dict) else repr(args)))
        if queue:
            self.replayed += 1
            r = queue.popleft()
            return ToolResult(r.tool, r.args, r.status, r.output, r.error, r.truncated, r.elapsed_s, replayed=True)
        if not self.live:
            self.off_record += 1
            return ToolResult(name, args if isinstance(args, dict) else {}, "refused",
                              error="replay: this tool call is not in the run's record")
        tool = self._tools.get(name)
        if tool is None:
            self.invalid += 1
            granted = ", ".join(self.names) or "none"
            return ToolResult(name, args if isinstance(args, dict) else {}, "unknown_tool",
                              error=f"no tool {name!r} was granted (granted: {granted})")
        why = validation_error(tool.spec.parameters, args)
        if why is not None:
            self.invalid += 1
            return ToolResult(name, args if isinstance(args, dict) else {}, "invalid", error=why)
        async with self._slots:
            self.live_calls += 1
            started = time.monotonic()
            try:
                output = await asyncio.wait_for(tool.call(args), self.limits.timeout_s)
            except TimeoutError:
                return ToolResult(name, args, "timeout", error=f"no answer within {self.limits.timeout_s:g} s",
                                  elapsed_s=round(time.monotonic() - started, 3))
            except ToolError as exc:
                return ToolResult(name, args, "error", error=valid_text(str(exc) or type(exc).__name__, f"tool {name}"),
                                  elapsed_s=round(time.monotonic() - started, 3))
            except Exception as exc:  # noqa: BLE001 - a tool's bug is the tool's failure, not the run's
                return ToolResult(name, args, "error", error=valid_text(f"{type(exc).__name__}: {exc}", f"tool {name}"),
                                  elapsed_s=round(time.monotonic() - started, 3))
        cap = self.limits.output_cap
        # A tool's answer is kept on the run's graph, stored and shown: valid text only (see llm/text.py).
        text = valid_text(output if isinstance(output, str) else str(output), f"tool {name}")
        return ToolResult(name, args, "ok", text[:cap], truncated=len(text) > cap,
                          elapsed_s=round(time.monotonic() - started, 3))

    async def aclose(self) -> None:
        """Stop what the tools started (MCP server processes and connections)."""
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            await closer.aclose()
