"""Native tool calling's wire vocabulary: function definitions sent with a request, and the calls a reply makes.

A request that carries function definitions (GenerateRequest.tools) goes to an endpoint's `tools` field
(OpenAI-compatible chat, Anthropic messages); the backend writes the model's reply as one canonical JSON
text, `tool_calls_text(...)`: the calls, each a function name and its arguments exactly as the model
wrote them (parsed later, so a malformed reply is the agent's failed step, never a backend error), and
any text beside them. A reply is a text like any other, so the cache, the run record and replay keep
the calls without knowing about them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FunctionDefinition:
    """One function a model may call: a valid function name, what it does, and a JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a reply made: the function's name and its arguments as the model wrote them (JSON text)."""

    name: str
    arguments: str


def definitions_text(functions: Sequence[FunctionDefinition]) -> str:
    """Function definitions as a request carries them: canonical JSON, so the cache and replay keys are stable."""
    return json.dumps([{"name": f.name, "description": f.description, "parameters": f.parameters}
                       for f in functions], sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def read_definitions(text: str) -> list[FunctionDefinition]:
    """The function definitions a request carries (written by `definitions_text`)."""
    return [FunctionDefinition(str(f["name"]), str(f.get("description") or ""), dict(f.get("parameters") or {}))
            for f in json.loads(text)]


def tool_calls_text(calls: Sequence[ToolCall], text: str = "") -> str:
    """A reply to a request with function definitions, as one canonical JSON text (it caches and replays)."""
    return json.dumps({"text": text, "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls]},
                      ensure_ascii=False, separators=(",", ":"))


def arguments_text(arguments: Any) -> str:
    """Arguments a reply gave as a JSON value (Anthropic's `input`) as the JSON text a ToolCall keeps."""
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def read_tool_calls(reply: str) -> tuple[list[ToolCall], str] | None:
    """The calls and text a `tool_calls_text` reply holds; None when the reply is not one (a model's plain text)."""
    try:
        data = json.loads(reply)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tool_calls"), list):
        return None
    calls = [ToolCall(str(c.get("name") or ""), c["arguments"] if isinstance(c.get("arguments"), str)
                      else arguments_text(c.get("arguments")))
             for c in data["tool_calls"] if isinstance(c, dict)]
    text = data.get("text")
    return calls, text if isinstance(text, str) else ""


#: What endpoints accept as a function name (OpenAI's rule; Anthropic's is the same).
FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_CHARS = 8


def function_names(names: Iterable[str]) -> dict[str, str]:
    """Each tool name's function name: itself when it is already valid, else its valid characters (others as
    `_`) and a digest of the whole name, so distinct tools get distinct names (MCP's `server.tool`, names
    with slashes or spaces, longer than 64). Deterministic: the same tools get the same names in every run."""
    names = sorted(set(names))
    out = {name: name for name in names if FUNCTION_NAME.match(name)}
    taken = set(out.values())
    for name in names:
        if name in out:
            continue
        digest = hashlib.sha256(name.encode()).hexdigest()
        base = _INVALID.sub("_", name) or "tool"
        width = _HASH_CHARS
        while True:  # a longer digest in the (vanishingly rare) case that a shorter one is taken
            candidate = f"{base[: 63 - width]}_{digest[:width]}"
            if candidate not in taken or width >= len(digest):
                break
            width *= 2
        out[name] = candidate
        taken.add(candidate)
    return out
