"""Recomposition contracts: what each child must return, how to merge, verify and recover."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...llm.text import loads_valid
from ..query import json_object, schema_text

#: Output types a child spec may require; each has an exact check and a parser from model text.
SPEC_TYPES: tuple[str, ...] = ("text", "integer", "number", "boolean", "list[integer]", "list[text]", "object[integer]")
#: Most retries / replans / backtracks one contract may ask for: so a failing plan cannot multiply its cost.
MAX_POLICY_COUNT = 5
#: Longest instruction (or goal) a reply schema lets a model write: where the schema is enforced, a
#: model that never closes its string is cut off by the grammar, not by max_tokens mid-JSON.
MAX_SCHEMA_TEXT = 300


class ContractError(ValueError):
    """A decomposition's contract is missing or malformed; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """The required output type of one child, as a checkable schema."""

    type: str = "text"
    #: Exact number of items (lists, objects) when the contract fixes it.
    length: int | None = None
    #: Bounds on numbers and on list items.
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: Any) -> str | None:
        """None when `value` has this type; otherwise why it does not."""
        t = self.type
        if value is None:
            return "no output"
        if t == "text":
            return None if isinstance(value, str) and value.strip() else "expected non-empty text"
        if t == "boolean":
            return None if isinstance(value, bool) else "expected a boolean"
        if t in ("integer", "number"):
            ok = isinstance(value, int) if t == "integer" else isinstance(value, (int, float))
            if not ok or isinstance(value, bool):
                return f"expected {'an integer' if t == 'integer' else 'a number'}"
            return self._bounds(value)
        if t.startswith("list["):
            if not isinstance(value, (list, tuple)):
                return f"expected {t}"
            want = int if t == "list[integer]" else str
            if not all(isinstance(v, want) and not isinstance(v, bool) for v in value):
                return f"expected {t}: an item has another type"
            if self.length is not None and len(value) != self.length:
                return f"expected {self.length} items, got {len(value)}"
            if want is int:
                for v in value:
                    if (why := self._bounds(v)) is not None:
                        return why
            return None
        if t == "object[integer]":
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items()
            ):
                return "expected an object of text -> integer"
            if self.length is not None and len(value) != self.length:
                return f"expected {self.length} keys, got {len(value)}"
            return None
        return f"unknown type {t!r}"

    def value_schema(self) -> dict[str, Any]:
        """The JSON Schema of a value of this type (a list or object of a fixed size keeps to it)."""
        t = self.type
        if t in ("integer", "number", "boolean"):
            return {"type": t}
        if t.startswith("list["):
            schema: dict[str, Any] = {
                "type": "array",
                "items": {"type": "integer" if t == "list[integer]" else "string"},
            }
            if self.length is not None:
                schema.update(minItems=self.length, maxItems=self.length)
            return schema
        if t == "object[integer]":
            return {"type": "object", "additionalProperties": {"type": "integer"}}
        return {"type": "string", "minLength": 1}

    def reply_schema(self) -> str:
        """The reply a solve or combine query asks for: {"value": V}, V of this type (JSON, sorted keys)."""
        return schema_text({"type": "object", "properties": {"value": self.value_schema()}, "required": ["value"]})

    def _bounds(self, v: float) -> str | None:
        if self.minimum is not None and v < self.minimum:
            return f"{v} is below the minimum {self.minimum:g}"
        if self.maximum is not None and v > self.maximum:
            return f"{v} is above the maximum {self.maximum:g}"
        return None

    def parse(self, text: str) -> Any:
        """The typed value in a model reply, or None when there is none of this type.

        A {"value": V} reply (what `reply_schema` asks for) gives V; anything else is read as text."""
        t = self.type
        text = text.strip()
        structured = json_object(text)
        if structured is not None and "value" in structured:
            return structured["value"]
        if t == "text":
            return text or None
        if t == "boolean":
            m = re.search(r"\b(true|false|yes|no)\b", text, re.I)
            return None if m is None else m.group(1).lower() in ("true", "yes")
        if t in ("integer", "number"):
            m = re.search(r"-?\d+(?:\.\d+)?", text)
            if m is None:
                return None
            return int(float(m.group())) if t == "integer" and "." not in m.group() else float(m.group())
        if t.startswith("list["):
            m = re.search(r"\[[^\[\]]*\]", text)
            if m is None:
                return None
            try:
                value = loads_valid(m.group())
            except json.JSONDecodeError:
                # A base model often drops quotes or leaves a trailing comma: read the items one by one.
                items = [x.strip().strip("'\"") for x in m.group()[1:-1].split(",") if x.strip()]
                if t == "list[integer]":
                    return [int(x) for x in items if re.fullmatch(r"-?\d+", x)] if items else []
                return items
            return value if isinstance(value, list) else None
        if t == "object[integer]":
            m = re.search(r"\{[^{}]*\}", text)
            if m is None:
                return None
            try:
                value = loads_valid(m.group())
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {k: v for k, v in (("type", self.type), ("length", self.length), ("minimum", self.minimum),
                                  ("maximum", self.maximum)) if v is not None}


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """What a failed recomposition or verification may do: counts of retries, replans, backtracks."""

    #: Re-solve the children that failed their own check and recompose again, up to this many times.
    retry: int = 1
    #: Ask the model for new decompositions of the goal, with the failure's diagnostics, this many times.
    replan: int = 0
    #: Try up to this many alternative decompositions of the goal after failures.
    backtrack: int = 1

    def to_dict(self) -> dict[str, int]:
        """Plain data for JSON output."""
        return {"retry": self.retry, "replan": self.replan, "backtrack": self.backtrack}


@dataclass(frozen=True, slots=True)
class Contract:
    """How a decomposition's child outputs are typed, merged, verified and recovered from."""

    child_specs: tuple[ChildSpec, ...]
    combine_instruction: str
    verify_instruction: str
    failure_policy: FailurePolicy = field(default_factory=FailurePolicy)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            "child_specs": [s.to_dict() for s in self.child_specs],
            "combine_instruction": self.combine_instruction,
            "verify_instruction": self.verify_instruction,
            "failure_policy": self.failure_policy.to_dict(),
        }


def contract_schema() -> dict[str, Any]:
    """The JSON Schema of a contract as a model writes it: child types by name, both instructions, a policy."""
    count = {"type": "integer", "minimum": 0, "maximum": MAX_POLICY_COUNT}
    text = {"type": "string", "minLength": 1, "maxLength": MAX_SCHEMA_TEXT}
    return {
        "type": "object",
        "properties": {
            "child_specs": {"type": "array", "minItems": 1, "items": {"enum": list(SPEC_TYPES)}},
            "combine_instruction": text,
            "verify_instruction": text,
            "failure_policy": {"type": "object", "properties": {k: count for k in ("retry", "replan", "backtrack")},
                               "required": ["retry", "replan", "backtrack"]},
        },
        "required": ["child_specs", "combine_instruction", "verify_instruction", "failure_policy"],
    }


def check_contract(contract: Contract | None, n_children: int) -> None:
    """Raise ContractError unless the contract exists and is well-formed for n_children children."""
    if contract is None:
        raise ContractError("missing contract: a decomposition needs child_specs, combine_instruction, "
                            "verify_instruction and failure_policy")
    if len(contract.child_specs) != n_children:
        raise ContractError(f"child_specs has {len(contract.child_specs)} entries for {n_children} children")
    for i, spec in enumerate(contract.child_specs):
        if spec.type not in SPEC_TYPES:
            raise ContractError(f"child_specs[{i}]: unknown type {spec.type!r}; use one of {', '.join(SPEC_TYPES)}")
        if spec.length is not None and spec.length < 0:
            raise ContractError(f"child_specs[{i}]: negative length")
    if not contract.combine_instruction.strip():
        raise ContractError("empty combine_instruction")
    if not contract.verify_instruction.strip():
        raise ContractError("empty verify_instruction")
    p = contract.failure_policy
    for name in ("retry", "replan", "backtrack"):
        count = getattr(p, name)
        if not isinstance(count, int) or not 0 <= count <= MAX_POLICY_COUNT:
            raise ContractError(f"failure_policy.{name} must be a whole number from 0 to {MAX_POLICY_COUNT}")


def parse_contract(data: Any, n_children: int) -> Contract:
    """A well-formed Contract from a model's JSON object; ContractError says what is missing."""
    if data is None:
        check_contract(None, n_children)
    if not isinstance(data, dict):
        raise ContractError("contract is not an object")
    for key in ("child_specs", "combine_instruction", "verify_instruction", "failure_policy"):
        if key not in data:
            raise ContractError(f"contract lacks {key}")
    raw_specs = data["child_specs"]
    if not isinstance(raw_specs, list):
        raise ContractError("child_specs is not a list")
    specs = []
    for i, raw in enumerate(raw_specs):
        if isinstance(raw, str):
            specs.append(ChildSpec(raw))
        elif isinstance(raw, dict) and isinstance(raw.get("type"), str):
            try:
                specs.append(ChildSpec(raw["type"], raw.get("length"), raw.get("minimum"), raw.get("maximum")))
            except TypeError:
                raise ContractError(f"child_specs[{i}] has unknown fields") from None
        else:
            raise ContractError(f"child_specs[{i}] is neither a type name nor an object with a type")
    policy = data["failure_policy"]
    if not isinstance(policy, dict):
        raise ContractError("failure_policy is not an object of retry / replan / backtrack counts")
    unknown = set(policy) - {"retry", "replan", "backtrack"}
    if unknown:
        raise ContractError(f"failure_policy has unknown keys: {', '.join(sorted(unknown))}")
    contract = Contract(
        tuple(specs), str(data["combine_instruction"]), str(data["verify_instruction"]),
        FailurePolicy(**{k: policy[k] for k in ("retry", "replan", "backtrack") if k in policy}),
    )
    check_contract(contract, n_children)
    return contract
