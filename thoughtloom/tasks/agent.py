"""The agent task: an open task ("Plan a trip ...") worked as a graph of typed steps.

This module is the agent's prompter and parser: every prompt the processors send (plan, step,
tool choice, critique, synthesis, revision) with its chat form for instruct models and its
completion form for base models, and the parsers that turn replies into typed values (plan
steps with dependencies, a tool call, a critique's verdict). The processors that send them and
the scheduler that runs them are in thoughtloom.search.agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..llm.text import valid_value
from ..llm.tool_calls import FunctionDefinition, definitions_text, function_names, read_tool_calls
from ..llm.types import Message, Prompt
from .base import ProblemError, Query, Task, few_shot_query, one_line
from .query import json_object, schema_text

#: Most steps one plan may have: a longer plan is cut (and the cut said on the plan node).
MAX_PLAN_STEPS = 8
#: Most steps and characters per step a plan's reply schema allows: the prompt asks for 3 to 6 short
#: lines, and where the schema is enforced a bounded plan always closes within the query's max_tokens.
SCHEMA_PLAN_STEPS = 6
SCHEMA_STEP_CHARS = 80
#: Sampling temperature of a tool call: arguments are copied from results, not invented (and a small
#: model sampled hot runs on inside an expression until max_tokens).
TOOL_TEMPERATURE = 0.2
#: Characters of a parent's result shown to a step that depends on it (room for a document search's passages).
RESULT_CHARS = 1500


class ToolDescription(Protocol):
    """What a prompt needs to know of a tool (thoughtloom.tools.ToolSpec has these, frozen)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a plan: what to do, which earlier steps it needs, and a tool it names, if any."""

    number: int
    text: str
    after: tuple[int, ...] = ()
    tool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, kept on the plan node."""
        return {"number": self.number, "text": self.text, "after": list(self.after), "tool": self.tool}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """A tool call the model asked for: the tool, its arguments, and what it wrote."""

    tool: str
    args: dict[str, Any]


class ToolCallError(ValueError):
    """A reply that was meant to call a tool and could not be read as a call."""


@dataclass(frozen=True, slots=True)
class CritiqueVerdict:
    """A critique's judgement of one thought: does it stand, and why (or why not)."""

    refutes: bool
    reasons: tuple[str, ...] = ()
    confidence: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, kept on the critique node."""
        return {"refutes": self.refutes, "reasons": list(self.reasons), "confidence": self.confidence}


@dataclass(frozen=True, slots=True)
class Context:
    """What a step sees of the steps it depends on: (label, result) pairs."""

    items: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def render(self) -> str:
        """The parents' results as short labelled lines ('none' when there are none)."""
        if not self.items:
            return "(none)"
        return "\n".join(f"- {label}: {one_line(result, RESULT_CHARS)}" for label, result in self.items)



# --- plans --------------------------------------------------------------------------------------

_PLAN_SYSTEM = (
    "You break a task into a short plan of 3 to 6 numbered steps. Each step is one line. A step that "
    "needs the result of earlier steps ends with (after N) or (after N, M). A step that a tool should do "
    "starts with the tool's name in brackets, like [calc]. The last step puts everything together."
)
# Two independent branches joined by the calculator: the model copies the example's shape, and a
# chain (every step after the one before) would leave nothing to run in parallel.
_PLAN_EXAMPLE = (
    "Task: Plan a weekend picnic for 4 people under 60 EUR; check the arithmetic.\nTools: calc",
    "1. Choose the food for 4 people.\n"
    "2. Choose the drinks for 4 people.\n"
    "3. Estimate the cost of the food in EUR. (after 1)\n"
    "4. Estimate the cost of the drinks in EUR. (after 2)\n"
    "5. [calc] Add up the costs. (after 3, 4)\n"
    "6. Check the total is under 60 EUR and write the final plan. (after 5)",
)
_STEP_LINE = re.compile(r"^\s*(?:step\s*)?(\d{1,2})\s*[.):]\s*(.+?)\s*$", re.IGNORECASE)
_AFTER = re.compile(r"\(\s*after\s+((?:step\s*)?\d+(?:\s*(?:,|and|&)\s*(?:step\s*)?\d+)*)\s*\)\s*\.?\s*$",
                    re.IGNORECASE)
_TOOL_TAG = re.compile(r"^\[\s*([A-Za-z][\w.:-]*)\s*\]\s*")


def plan_schema(tools: Sequence[str]) -> str:
    """The reply a plan query asks for: {"steps": [{"text", "after", "tool"}]}, steps numbered by position,
    "after" naming earlier steps' numbers, "tool" one of the granted tools."""
    step: dict[str, Any] = {
        "text": {"type": "string", "minLength": 1, "maxLength": SCHEMA_STEP_CHARS},
        "after": {"type": "array", "maxItems": SCHEMA_PLAN_STEPS - 1, "items": {"type": "integer", "minimum": 1}},
    }
    if tools:
        step["tool"] = {"enum": sorted(tools)}
    return schema_text({"type": "object", "properties": {"steps": {
        "type": "array", "minItems": 1, "maxItems": SCHEMA_PLAN_STEPS,
        "items": {"type": "object", "properties": step, "required": ["text"]}}}, "required": ["steps"]})


def plan_query(task: str, tools: Sequence[str]) -> Query:
    """Ask for a numbered plan whose steps name their dependencies and tools (as JSON where the backend
    enforces the schema; numbered lines elsewhere)."""
    tool_line = ", ".join(tools) if tools else "none"
    return few_shot_query(_PLAN_SYSTEM, [_PLAN_EXAMPLE], f"Task: {task}\nTools: {tool_line}", max_tokens=220,
                          schema=plan_schema(tools))


def parse_plan(text: str, tools: Sequence[str] = ()) -> list[PlanStep]:
    """Plan steps from a {"steps": [...]} reply, else from numbered lines; dependencies on missing or later
    steps are dropped, tools kept only if granted.

    A dependency can only point back (to an earlier number), so a plan read here cannot hold a
    cycle; `check_plan` refuses explicit plans that would make one.
    """
    data = json_object(text)
    if data is not None and isinstance(data.get("steps"), list):
        return _json_plan(data["steps"], tools)
    steps: list[PlanStep] = []
    seen: set[int] = set()
    for line in text.splitlines():
        m = _STEP_LINE.match(line.strip().strip("*"))
        if m is None:
            continue
        number, body = int(m.group(1)), m.group(2).strip().strip("*").strip()
        if number in seen:
            continue
        after: tuple[int, ...] = ()
        dep = _AFTER.search(body)
        if dep is not None:
            after = tuple(sorted({int(d) for d in re.findall(r"\d+", dep.group(1))} & seen))
            body = body[: dep.start()].rstrip(" .")
        tool = None
        tag = _TOOL_TAG.match(body)
        if tag is not None:
            name = tag.group(1).lower()
            body = body[tag.end():].strip()
            tool = name if name in tools else None
        if not body:
            continue
        steps.append(PlanStep(number, body, after, tool))
        seen.add(number)
        if len(steps) >= MAX_PLAN_STEPS:
            break
    return steps


def _json_plan(items: Sequence[Any], tools: Sequence[str]) -> list[PlanStep]:
    """Plan steps from a structured reply's items, numbered by position (an item without text is skipped,
    keeping the numbers the others' "after" lists refer to)."""
    steps: list[PlanStep] = []
    seen: set[int] = set()
    for number, item in enumerate(items, 1):
        body = item.get("text") if isinstance(item, dict) else None
        if not isinstance(body, str) or not body.strip():
            continue
        after_raw = item.get("after")
        after = tuple(sorted({a for a in after_raw if isinstance(a, int) and not isinstance(a, bool)} & seen)
                      if isinstance(after_raw, list) else ())
        tool = item.get("tool")
        tool = tool.lower() if isinstance(tool, str) and tool.lower() in tools else None
        steps.append(PlanStep(number, " ".join(body.split()), after, tool))
        seen.add(number)
        if len(steps) >= MAX_PLAN_STEPS:
            break
    return steps


def check_plan(steps: Sequence[PlanStep]) -> str | None:
    """Why a plan cannot run (a cycle, a dependency on a step it does not have, a repeated number), or None."""
    numbers = [s.number for s in steps]
    if len(set(numbers)) != len(numbers):
        return "two steps share a number"
    known = set(numbers)
    deps = {s.number: set(s.after) for s in steps}
    for s in steps:
        missing = sorted(set(s.after) - known)
        if missing:
            return f"step {s.number} depends on step {missing[0]}, which the plan does not have"
    # Depth-first search for a back edge; the path found is the reason given.
    state: dict[int, int] = {}

    def visit(n: int, path: list[int]) -> list[int] | None:
        state[n] = 1
        for d in sorted(deps[n]):
            if state.get(d) == 1:
                return [*path, n, d]
            if d not in state and (found := visit(d, [*path, n])) is not None:
                return found
        state[n] = 2
        return None

    for n in numbers:
        if n not in state and (cycle := visit(n, [])) is not None:
            start = cycle.index(cycle[-1])
            loop = " -> ".join(f"step {x}" for x in cycle[start:])
            return f"the plan's dependencies form a cycle: {loop}"
    return None


# --- steps --------------------------------------------------------------------------------------

_STEP_SYSTEM = (
    "You carry out one step of a plan for a task. Use the results of earlier steps. Reply with the "
    "step's result only, in at most 4 short lines, with concrete names and numbers."
)
_STEP_EXAMPLE = (
    "Task: Plan a weekend picnic for 4 people under 60 EUR.\nEarlier results:\n- step 1: sandwiches, "
    "apples, lemonade for 4 people\nStep: Estimate the cost of each item in EUR.",
    "Sandwiches: 4 x 4.50 = 18 EUR\nApples: 1 bag = 3 EUR\nLemonade: 2 bottles x 2.50 = 5 EUR",
)


def step_query(task: str, step: str, context: Context) -> Query:
    """Ask for one step's result, given its parents' results."""
    return few_shot_query(_STEP_SYSTEM, [_STEP_EXAMPLE],
                  f"Task: {task}\nEarlier results:\n{context.render()}\nStep: {step}", max_tokens=160)


# --- tool choice --------------------------------------------------------------------------------

_TOOL_SYSTEM = (
    'You call one tool to do a step. Reply with one JSON object: {"tool": the tool\'s name, "args": its input}. '
    "Use only numbers that the task or the results give."
)
_TOOL_EXAMPLE = (
    'Task: Plan a weekend picnic for 4 people under 60 EUR.\nTools:\n- calc: exact arithmetic {"expression": string}\n'
    "Earlier results:\n- step 2: Sandwiches: 18 EUR\nApples: 3 EUR\nLemonade: 5 EUR\nStep: Add up the costs.",
    '{"tool": "calc", "args": {"expression": "18 + 3 + 5"}}',
)


def _describe_tool(t: ToolDescription) -> str:
    props = t.parameters.get("properties") or {}
    # Sorted: a stored run keeps the schema with sorted keys, and its replay must ask the same.
    args = ", ".join(f'"{k}": {(v or {}).get("type", "value")}' for k, v in sorted(props.items()))
    return f"- {t.name}: {one_line(t.description, 160)} {{{args}}}"


def tool_call_schema(tools: Sequence[ToolDescription]) -> str:
    """The JSON Schema of a call to one of `tools` ({"tool": name, "args": its arguments}), as canonical JSON."""
    # The arguments' schema with sorted keys, as a stored run keeps it (so a replay asks the same);
    # the call's own keys in the order written, so a grammar makes the model name the tool first.
    options = [{"type": "object", "properties": {"tool": {"enum": [t.name]}, "args": _sorted(t.parameters)},
                "required": ["tool", "args"]} for t in tools]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return json.dumps(schema, separators=(",", ":"))


def _sorted(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def tool_query(task: str, step: str, context: Context, tools: Sequence[ToolDescription]) -> Query:
    """Ask for a tool call as a JSON object, constrained to the tools' schemas where the backend can."""
    listing = "\n".join(_describe_tool(t) for t in tools)
    return few_shot_query(
        _TOOL_SYSTEM,
        [_TOOL_EXAMPLE],
        f"Task: {task}\nTools:\n{listing}\nEarlier results:\n{context.render()}\nStep: {step}",
        max_tokens=160,
        stop=("\n\n",),
        schema=tool_call_schema(tools),
        temperature=TOOL_TEMPERATURE,
    )


_NATIVE_TOOL_SYSTEM = (
    "You do one step of a task by calling the tool you are given. Take its arguments from the task and the "
    "earlier results; call it once. Use only numbers that the task or the results give."
)


def native_tool_query(task: str, step: str, context: Context, tools: Sequence[ToolDescription]) -> Query:
    """Ask for a tool call through the endpoint's function calling: the tools go as function definitions
    (names made valid by llm.tool_calls.function_names), the reply is the model's calls."""
    names = function_names(t.name for t in tools)
    functions = [FunctionDefinition(names[t.name], t.description, _sorted(t.parameters)) for t in tools]
    user = f"Task: {task}\nEarlier results:\n{context.render()}\nStep: {step}"
    return Query(Prompt(messages=(Message("system", _NATIVE_TOOL_SYSTEM), Message("user", user))),
                 max_tokens=256, temperature=TOOL_TEMPERATURE, tools=definitions_text(functions))


def parse_native_tool_call(reply: str, tools: Mapping[str, ToolDescription]) -> ToolChoice:
    """The first call a native tool-calling reply makes, its function name mapped back to the tool's.

    A reply without calls is read as the text protocol's call (a model that wrote its call out, a
    server that ignored the tools). Raises ToolCallError for an unknown function, arguments that are
    not a JSON object, or no call at all: the model's reply is untrusted input.
    """
    got = read_tool_calls(reply)
    if got is None:
        return parse_tool_call(reply, tools)
    calls, text = got
    if not calls:
        if text.strip():
            return parse_tool_call(text, tools)
        raise ToolCallError("the reply made no tool call")
    tool_of = {function: name for name, function in function_names(tools).items()}
    call = calls[0]
    name = tool_of.get(call.name)
    if name is None:
        raise ToolCallError(f"the reply calls {one_line(call.name, 64)!r}, which is not one of the functions "
                            f"offered ({', '.join(sorted(tool_of))})")
    try:
        args = json.loads(call.arguments)
    except ValueError as exc:
        raise ToolCallError(f"the arguments of {name} are not valid JSON ({one_line(str(exc), 80)}): "
                            f"{one_line(call.arguments, 80)}") from None
    if not isinstance(args, dict):
        raise ToolCallError(f"the arguments of {name} are not a JSON object: {one_line(call.arguments, 80)}")
    return ToolChoice(name, args)


_CALL_LINE = re.compile(r"^\s*`*\s*([A-Za-z][\w.:-]*)\s*(?::|\()\s*(.*?)\s*\)?\s*`*\s*$", re.DOTALL)


def parse_tool_call(text: str, tools: Mapping[str, ToolDescription]) -> ToolChoice:
    """A tool call in a reply: a JSON object {"tool": ..., "args": {...}}, or `name: {json}`, or `name: plain text`.

    Plain text is accepted for a tool with exactly one required string argument (calc: 2 + 3).
    Raises ToolCallError saying what was wrong; never guesses a tool the reply did not name.
    """
    body = text.strip().strip("`").strip()
    if body.startswith("json"):
        body = body[4:].strip()
    if body.startswith("{"):
        data = _first_json(body)
        if isinstance(data, dict) and isinstance(data.get("tool") or data.get("name"), str):
            name = str(data.get("tool") or data.get("name"))
            args = data.get("args", data.get("arguments", {}))
            if not isinstance(args, dict):
                raise ToolCallError(f"the arguments of {name} are not a JSON object")
            return ToolChoice(_known(name, tools), args)
    for line in body.splitlines():
        m = _CALL_LINE.match(line)
        if m is None or _resolve(m.group(1), tools) is None:
            continue
        name, rest = _known(m.group(1), tools), m.group(2).strip()
        if rest.startswith("{"):
            data = _first_json(rest)
            if not isinstance(data, dict):
                raise ToolCallError(f"the input to {name} is not a JSON object: {one_line(rest, 80)}")
            return ToolChoice(name, data)
        only = _single_string_arg(tools[name])
        if only is None or not rest:
            raise ToolCallError(f"{name} needs JSON arguments, like {name}: {{...}}")
        return ToolChoice(name, {only: rest.strip("\"'")})
    raise ToolCallError("no tool call in the reply (expected a line like calc: {\"expression\": \"2 + 3\"})")


def _resolve(name: str, tools: Mapping[str, ToolDescription]) -> str | None:
    if name in tools:
        return name
    lowered = {k.lower(): k for k in tools}
    return lowered.get(name.lower())


def _known(name: str, tools: Mapping[str, ToolDescription]) -> str:
    found = _resolve(name, tools)
    if found is None:
        raise ToolCallError(f"the reply calls {name!r}, which is not one of the granted tools")
    return found


def _single_string_arg(tool: ToolDescription) -> str | None:
    props = tool.parameters.get("properties") or {}
    required = tool.parameters.get("required") or list(props)
    if len(required) == 1 and (props.get(required[0]) or {}).get("type", "string") == "string":
        return str(required[0])
    return None


def _first_json(text: str) -> Any:
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return valid_value(value, "a tool call in a model's reply")


# --- synthesis, critique, revision ----------------------------------------------------------------

_SYNTH_SYSTEM = (
    "You write the final answer to a task from the results of its steps. Keep every number the results "
    "give; do not invent new ones. Be concise: at most 10 lines."
)


_SYNTH_EXAMPLE = (
    "Task: Plan a weekend picnic for 4 people under 60 EUR.\nResults of the steps:\n- step 1: sandwiches, apples, "
    "lemonade\n- step 2: Sandwiches: 4 x 4.50 = 18 EUR\nApples: 3 EUR\nLemonade: 5 EUR\n- step 3: 18 + 3 + 5 = 26"
    "\n\nFinal answer:",
    "Picnic for 4 people, 26 EUR in total (under 60 EUR):\n- Sandwiches: 4 x 4.50 = 18 EUR\n- Apples: 3 EUR\n"
    "- Lemonade: 5 EUR\nTotal: 18 + 3 + 5 = 26 EUR",
)


def synthesis_query(task: str, context: Context) -> Query:
    """Ask for one answer that combines the parents' results."""
    return few_shot_query(_SYNTH_SYSTEM, [_SYNTH_EXAMPLE],
                  f"Task: {task}\nResults of the steps:\n{context.render()}\n\nFinal answer:", max_tokens=300)


_CRITIQUE_SYSTEM = (
    "You check an answer to a task. Reply with VERDICT: ok if it does what the task asks, or VERDICT: wrong "
    "if it does not (a wrong number, a broken limit, a missing part), then REASON: one line."
)
_CRITIQUE_EXAMPLE = (
    "Task: Plan a picnic for 4 under 60 EUR.\nAnswer: Sandwiches 18 EUR, drinks 5 EUR, total 23 EUR.",
    "VERDICT: ok\nREASON: the total of 23 EUR is under 60 EUR and covers food and drinks.",
)
_VERDICT = re.compile(r"verdict\s*[:=]?\s*\**\s*(ok|correct|good|pass|wrong|incorrect|bad|fail)", re.IGNORECASE)
_REASON = re.compile(r"reason\s*[:=]\s*(.+)", re.IGNORECASE)


def critique_query(task: str, answer: str, checks: Sequence[str] = ()) -> Query:
    """Ask whether an answer does what the task asks (with what exact checks already found)."""
    found = ("\nChecks already made:\n" + "\n".join(f"- {c}" for c in checks)) if checks else ""
    return few_shot_query(
        _CRITIQUE_SYSTEM, [_CRITIQUE_EXAMPLE], f"Task: {task}\nAnswer: {one_line(answer, 1200)}{found}", max_tokens=80
    )


def parse_critique(text: str) -> CritiqueVerdict:
    """A critique reply's verdict; a reply with no verdict refutes nothing (confidence 0)."""
    m = _VERDICT.search(text)
    reason = _REASON.search(text)
    reasons = (reason.group(1).strip(),) if reason is not None else ()
    if m is None:
        return CritiqueVerdict(False, reasons or ("no verdict given",), 0.0)
    refutes = m.group(1).lower() in {"wrong", "incorrect", "bad", "fail"}
    return CritiqueVerdict(refutes, reasons, 0.6)


_REVISE_SYSTEM = (
    "You correct an answer to a task. The check below found problems with it; fix exactly those and "
    "keep the rest. Reply with the corrected answer only."
)


_REVISE_EXAMPLE = (
    "Task: Plan a weekend picnic for 4 people under 60 EUR.\nAnswer: Sandwiches 18 EUR, apples 3 EUR, lemonade 5 EUR. "
    "Total: 18 + 3 + 5 = 28 EUR.\nProblems:\n- 18 + 3 + 5 is 26, not 28\n\nCorrected answer:",
    "Sandwiches 18 EUR, apples 3 EUR, lemonade 5 EUR. Total: 18 + 3 + 5 = 26 EUR, under 60 EUR.",
)


def revise_query(task: str, answer: str, problems: Sequence[str]) -> Query:
    """Ask for the answer again, fixing what the critique found."""
    listed = "\n".join(f"- {p}" for p in problems) or "- (none stated)"
    return few_shot_query(
        _REVISE_SYSTEM,
        [_REVISE_EXAMPLE],
        f"Task: {task}\nAnswer: {one_line(answer, 1200)}\nProblems:\n{listed}\n\nCorrected answer:",
        max_tokens=300,
    )


_CODE_SYSTEM = (
    "You write a short Python 3 program that does one step of a task and prints its result. Reply with the "
    "code only, in one ```python block."
)


def code_query(task: str, step: str, context: Context, feedback: str | None = None) -> Query:
    """Ask for a program that does the step and prints the result (with the last run's error, if any)."""
    fix = f"\nThe last program failed: {one_line(feedback, 300)}\nWrite a corrected program." if feedback else ""
    return few_shot_query(_CODE_SYSTEM, [], f"Task: {task}\nEarlier results:\n{context.render()}\nStep: {step}{fix}",
                  max_tokens=300)


_DECOMPOSE_SYSTEM = (
    "You split a question into 2 to 4 simpler sub-questions whose answers together answer it. One "
    "sub-question per numbered line; end a line with (number) if its answer is a number."
)


def decompose_query(task: str, question: str) -> Query:
    """Ask for sub-questions, each with the type of its answer."""
    return few_shot_query(_DECOMPOSE_SYSTEM, [], f"Task: {task}\nQuestion: {question}", max_tokens=160)


_HYPOTHESIS_SYSTEM = "You state the most likely answer to a question in one sentence, as a hypothesis to test."


def hypothesis_query(task: str, question: str, context: Context) -> Query:
    """Ask for a one-sentence hypothesis."""
    return few_shot_query(_HYPOTHESIS_SYSTEM, [], f"Task: {task}\nKnown:\n{context.render()}\nQuestion: {question}",
                  max_tokens=80)


class AgentTask(Task[str]):
    """An open task for the agent: any request in words; its answer is the agent's solution node."""

    name = "agent"
    description = "an open task worked as a plan of typed, dependent steps with tools (loom agent)"
    free_text_steps = True
    programmatic_answer = True
    search_defaults = {"strategy": "agent", "max_nodes": 60}

    def parse_problem(self, text: str) -> str:
        """The task text itself; empty text is refused."""
        text = text.strip()
        if not text:
            raise ProblemError("the task is empty; say what the agent should do, e.g. loom agent \"Plan a trip\"")
        return text
