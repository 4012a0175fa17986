"""What the recursive strategy asks of a task: goals, plans, prompts, recomposition and verification.

`RecursiveHooks` is the generic, model-driven form usable with any task: the model proposes
decompositions as JSON (each with its contract), solves leaves, recomposes following the
contract's combine_instruction and verifies following its verify_instruction. A task with exact
structure (sorting, set intersection) subclasses it to supply programmatic plans, recomposition
and verification, and few-shot prompts for a base model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...llm.types import Message, Prompt
from ..query import Query, json_object, schema_text
from ..similarity import is_paraphrase, normalize_words
from .contract import (
    MAX_SCHEMA_TEXT,
    ChildSpec,
    Contract,
    ContractError,
    FailurePolicy,
    contract_schema,
    parse_contract,
)

MODES: tuple[str, ...] = ("decompose", "solve", "chain")


@dataclass(frozen=True, slots=True)
class Goal:
    """What one solve() call must achieve, and all it may see: its text and the context its contract gives."""

    text: str
    context: tuple[str, ...] = ()
    #: The output type the parent's contract requires (None at the root: the task's own answer).
    spec: ChildSpec | None = None
    #: The task's structured form of the goal (e.g. the sub-list to sort); never shown to siblings.
    payload: Any = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Plan:
    """One way to pursue a goal: solve it directly, or split it (decompose / chain) under a contract."""

    mode: str
    children: tuple[Goal, ...] = ()
    contract: Contract | None = None
    #: Decomposition quality in [0, 1]: the ranking signal known before the plan runs.
    quality: float = 0.5
    #: "task" (programmatic) or "model" (proposed by the model).
    source: str = "task"
    #: Why the plan is invalid (its branch is cut before it runs); None when valid.
    invalid: str | None = None

    def describe(self) -> str:
        """A one-line label for the graph."""
        if self.mode == "solve":
            return "solve directly"
        return f"{self.mode} into {len(self.children)}: " + " | ".join(c.text for c in self.children)


@dataclass(frozen=True, slots=True)
class Verification:
    """Pass / fail of a result, how sure the check is, and what it found."""

    passed: bool
    confidence: float
    diagnostics: tuple[str, ...] = ()
    #: Exact error count when the task has one (GoT tasks).
    errors: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        out: dict[str, Any] = {"passed": self.passed, "confidence": round(self.confidence, 4),
                               "diagnostics": list(self.diagnostics)}
        if self.errors is not None:
            out["errors"] = self.errors
        return out


def plans_schema(k: int) -> str:
    """The reply a propose query asks for: {"plans": [...]}, 1 to k plans, each a direct solve or a
    decomposition with its children and contract (JSON, sorted keys: part of a stored request's key)."""
    text = {"type": "string", "minLength": 1, "maxLength": MAX_SCHEMA_TEXT}
    confidence = {"type": "number", "minimum": 0, "maximum": 1}
    solve = {"type": "object", "properties": {"mode": {"const": "solve"}, "confidence": confidence},
             "required": ["mode"]}
    split = {
        "type": "object",
        "properties": {
            "mode": {"enum": [m for m in MODES if m != "solve"]},
            "confidence": confidence,
            "children": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"goal": text, "context": {"type": "string", "maxLength": MAX_SCHEMA_TEXT}},
                    "required": ["goal"],
                },
            },
            "contract": contract_schema(),
        },
        "required": ["mode", "confidence", "children", "contract"],
    }
    plans = {"type": "array", "minItems": 1, "maxItems": max(1, k), "items": {"anyOf": [solve, split]}}
    return schema_text({"type": "object", "properties": {"plans": plans}, "required": ["plans"]})


#: The reply a verify query asks for (JSON, sorted keys).
VERIFICATION_SCHEMA = schema_text(
    {"type": "object", "properties": {"verdict": {"enum": ["PASS", "FAIL"]},
                                      "reason": {"type": "string", "maxLength": 160}}, "required": ["verdict"]})


def _normal(text: str) -> str:
    # Punctuation and hyphens never change a goal: "two-line" and "two line" are one goal.
    return " ".join(normalize_words(re.sub(r"[^\w]+", " ", text.lower())))


def _json_in(text: str) -> Any:
    """The first JSON object or list in a reply (models wrap JSON in prose or code fences)."""
    for opener in ("{", "["):
        start = text.find(opener)
        while start != -1:
            try:
                value, _ = json.JSONDecoder().raw_decode(text[start:])
                return value
            except json.JSONDecodeError:
                start = text.find(opener, start + 1)
    return None


class RecursiveHooks:
    """The generic, model-driven decomposition hooks; tasks subclass to make parts exact."""

    #: Whether the model is asked to propose decompositions (and to replan after failures).
    model_plans: bool = True
    #: Quality given to the direct-solve alternative of a goal.
    solve_quality: float = 0.3
    default_policy: FailurePolicy = FailurePolicy(retry=1, replan=1, backtrack=2)

    def __init__(self, root_text: str) -> None:
        self.root_text = root_text

    # --- goals ------------------------------------------------------------------------

    def root_goal(self) -> Goal:
        """The goal of the whole problem."""
        return Goal(self.root_text, spec=ChildSpec("text"))

    def equivalent(self, a: Goal, b: Goal) -> bool:
        """True when two goals are the same problem (cycle detection): equal normalized text or a paraphrase."""
        return _normal(a.text) == _normal(b.text) or is_paraphrase(_normal(a.text), _normal(b.text))

    def render(self, goal: Goal, value: Any) -> str:
        """A result as text (the graph's content and what a parent's prompt shows)."""
        if isinstance(value, str):
            return value
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))

    def spec(self, goal: Goal) -> ChildSpec:
        """The output type a goal's result must have."""
        return goal.spec or ChildSpec("text")

    # --- plans ------------------------------------------------------------------------

    def plans(self, goal: Goal, depth: int) -> list[Plan]:
        """Decompositions the task knows without asking the model (none by default)."""
        return []

    def allow_direct(self, goal: Goal, depth: int) -> bool:
        """Whether solving the goal in one call is an alternative worth ranking."""
        return True

    def propose_query(self, goal: Goal, k: int, feedback: str | None) -> Query:
        """Ask the model for up to k plans for the goal, each decomposition with its contract."""
        context = "".join(f"Context: {c}\n" for c in goal.context)
        retry = f"An earlier plan failed: {feedback}\nPropose different plans.\n" if feedback else ""
        text = (
            "Decompose the goal into sub-goals when that helps, or solve it directly.\n"
            f"Reply with JSON: {{\"plans\": [...]}}, at most {k} plans. A plan is {{\"mode\": \"solve\"}} or "
            "{\"mode\": \"decompose\" | \"chain\", \"confidence\": 0..1, \"children\": [{\"goal\": \"...\", "
            "\"context\": \"...\"}], \"contract\": {\"child_specs\": [\"text\" | \"integer\" | \"number\" | "
            "\"boolean\" | \"list[integer]\" | \"list[text]\" | \"object[integer]\"], \"combine_instruction\": "
            "\"...\", \"verify_instruction\": \"...\", \"failure_policy\": {\"retry\": 1, \"replan\": 1, "
            "\"backtrack\": 1}}}. chain children run in order, each seeing the previous result.\n"
            f"Goal: {goal.text}\n{context}{retry}Plans (JSON):"
        )
        # The prompt already asks for this JSON; where the backend enforces the schema it is all it can write.
        return Query(Prompt(text=text, messages=(
            Message("system", "You plan how to solve problems by decomposing them. Reply with JSON only."),
            Message("user", text),
        )), max_tokens=600, schema=plans_schema(k))

    def parse_plans(self, goal: Goal, text: str) -> list[Plan]:
        """The plans in a propose reply; malformed decompositions come back with `invalid` set."""
        data = _json_in(text)
        raw = data.get("plans") if isinstance(data, dict) else data
        if not isinstance(raw, list):
            return []
        plans = []
        for item in raw:
            if not isinstance(item, dict) or item.get("mode") not in MODES:
                plans.append(Plan("decompose", source="model", invalid=f"not a plan: {str(item)[:80]}"))
                continue
            mode = item["mode"]
            try:
                quality = min(1.0, max(0.0, float(item.get("confidence", 0.6))))
            except (TypeError, ValueError):
                quality = 0.6
            if mode == "solve":
                plans.append(Plan("solve", quality=quality, source="model"))
                continue
            children_raw = item.get("children")
            if not isinstance(children_raw, list) or not children_raw:
                plans.append(Plan(mode, source="model", quality=quality, invalid="a decomposition without children"))
                continue
            texts = [c.get("goal") if isinstance(c, dict) else c for c in children_raw]
            if not all(isinstance(t, str) and t.strip() for t in texts):
                plans.append(Plan(mode, source="model", quality=quality, invalid="a child without a goal"))
                continue
            goals = [str(t).strip() for t in texts]  # all str, checked above
            contexts = [str(c.get("context", "")).strip() if isinstance(c, dict) else "" for c in children_raw]
            try:
                contract: Contract | None = parse_contract(item.get("contract"), len(texts))
                invalid = None
            except ContractError as exc:
                contract, invalid = None, f"invalid contract: {exc}"
            specs: tuple[ChildSpec | None, ...] = contract.child_specs if contract else (None,) * len(texts)
            children = tuple(
                Goal(t, (c,) if c else (), s) for t, c, s in zip(goals, contexts, specs, strict=True)
            )
            plans.append(Plan(mode, children, contract, quality, "model", invalid))
        return plans

    # --- solve ------------------------------------------------------------------------

    def solve_query(self, goal: Goal, attempt: int, feedback: str | None) -> Query:
        """Ask for a direct solution of the goal (attempt > 0: a retry, with why the last one failed)."""
        spec = self.spec(goal)
        context = "".join(f"Context: {c}\n" for c in goal.context)
        retry = f"A previous answer was rejected: {feedback}\n" if feedback else ""
        text = f"Solve the goal. Answer with a {spec.type} only.\nGoal: {goal.text}\n{context}{retry}Answer:"
        # Where the schema is enforced the reply is {"value": V} of the contract's type; elsewhere free text.
        return Query(Prompt(text=text, messages=(Message("user", text),)), max_tokens=300, schema=spec.reply_schema())

    def parse_result(self, goal: Goal, text: str) -> Any:
        """The typed value in a solve or combine reply (None when there is none)."""
        return self.spec(goal).parse(text)

    # --- recompose and verify ---------------------------------------------------------

    def combine(self, goal: Goal, plan: Plan, results: Sequence[Any]) -> Any | None:
        """Programmatic recomposition; None: the model recomposes following combine_instruction."""
        return None

    def combine_query(self, goal: Goal, plan: Plan, results: Sequence[Any], feedback: str | None) -> Query:
        """Ask the model to merge the children's results as the contract says."""
        assert plan.contract is not None
        parts = "".join(
            f"{i}. {c.text}: {self.render(c, r)}\n"
            for i, (c, r) in enumerate(zip(plan.children, results, strict=True), 1)
        )
        retry = f"A previous combination was rejected: {feedback}\n" if feedback else ""
        text = (
            f"Combine the results of the sub-goals into the result of the goal.\nGoal: {goal.text}\n"
            f"Instruction: {plan.contract.combine_instruction}\nSub-results:\n{parts}{retry}"
            f"Combined result ({self.spec(goal).type}):"
        )
        return Query(Prompt(text=text, messages=(Message("user", text),)), max_tokens=400,
                     schema=self.spec(goal).reply_schema())

    def verify(self, goal: Goal, value: Any) -> Verification | None:
        """Programmatic verification of a goal's result; None when the task has none."""
        return None

    def verify_query(self, goal: Goal, instruction: str, value: Any) -> Query:
        """Ask the model to check a result following a verify_instruction."""
        text = (
            f"Verify the result of the goal.\nGoal: {goal.text}\nCheck: {instruction}\n"
            f"Result: {self.render(goal, value)}\nReply PASS, or FAIL and the reason.\nVerdict:"
        )
        return Query(Prompt(text=text, messages=(Message("user", text),)), max_tokens=60, temperature=0.0,
                     schema=VERIFICATION_SCHEMA)

    def parse_verification(self, text: str) -> Verification:
        """PASS / FAIL from a verify reply: {"verdict": ..., "reason": ...} as JSON, else the words in text
        (anything else counts as a failure the model could not state)."""
        data = json_object(text)
        if data is not None and data.get("verdict") in ("PASS", "FAIL"):
            passed = data["verdict"] == "PASS"
            reason = str(data.get("reason") or "").strip()[:160]
            return Verification(passed, 0.8 if passed else 0.0,
                                (f"model: {data['verdict']}" + (f": {reason}" if reason else ""),))
        m = re.search(r"\b(PASS|FAIL)\b", text, re.I)
        if m is None:
            return Verification(False, 0.0, (f"no verdict in {text.strip()[:80]!r}",))
        passed = m.group(1).upper() == "PASS"
        reason = text[m.end():].strip(" :.-\n")[:160]
        return Verification(
            passed, 0.8 if passed else 0.0, (f"model: {m.group(1).upper()}" + (f": {reason}" if reason else ""),)
        )

    def errors(self, goal: Goal, value: Any) -> int | None:
        """The task's exact error count of a root result (None when it has no such count)."""
        return None
