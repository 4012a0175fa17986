"""The shapes of stored blocks, checked where a reader takes them from the store.

A store can be crafted (a CAR from someone else, a file edited with sqlite3): every block verifies
against its CID and still holds a string where a link belongs, a node status no search writes, a
chunk that is a number. The readers (runs.py, manifest.py) check each field they use against a
`Shape` before building anything from it, so the rest of the code meets only what a run stores;
a field that does not fit is one `BadShape` naming the block and the field, which the readers
turn into a `CorruptRun` (store/runs.py) naming the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .blocks import Link, cid_bytes, cid_str

#: The largest whole number a run stores (a signed 64-bit one: a count read back can still grow by one).
MAX_WHOLE = 2**63 - 1
#: The latest time a run can have started (9999-12-31): past it the time cannot be shown.
MAX_TIME = 253_402_300_799.0


class BadShape(ValueError):
    """A stored block, or one of its fields, that is not what a run stores there (one line)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """A test a stored value must pass, and what it is said to be when it fails."""

    test: Callable[[Any], bool]
    says: str


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_WHOLE <= value <= MAX_WHOLE


def _number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) <= 2.0**64)


ANY = Shape(lambda v: True, "anything")
WHOLE = Shape(_whole, "a whole number")
COUNT = Shape(lambda v: _whole(v) and v >= 0, "a whole number from 0")
NUMBER = Shape(_number, "a finite number")
TIME = Shape(lambda v: _number(v) and 0 <= v <= MAX_TIME, "a time in seconds since 1970")
TEXT = Shape(lambda v: isinstance(v, str), "a string")
BOOL = Shape(lambda v: isinstance(v, bool), "true or false")
LINK = Shape(lambda v: isinstance(v, Link), "a link")
MAP = Shape(lambda v: isinstance(v, dict), "a map")
TEXT_OR_LINK = Shape(lambda v: isinstance(v, (str, Link)), "a string or a link")


def _cid(value: Any) -> bool:
    try:
        return isinstance(value, str) and cid_str(cid_bytes(value)) == value
    except ValueError:
        return False


#: A CID written as text, in its canonical form (a manifest file's head, graph and calls; a ref).
CID_TEXT = Shape(_cid, "a CID (b...)")


def optional(shape: Shape) -> Shape:
    """The shape, or null."""
    return Shape(lambda v: v is None or shape.test(v), f"{shape.says} or null")


def one_of(values: Collection[str]) -> Shape:
    """One of these strings."""
    return Shape(lambda v: isinstance(v, str) and v in values, f"one of {', '.join(sorted(values))}")


def list_of(shape: Shape, length: int | None = None) -> Shape:
    """A list (of `length` items, when given) whose every item has the shape."""
    def test(value: Any) -> bool:
        return (isinstance(value, list) and (length is None or len(value) == length)
                and all(shape.test(item) for item in value))

    return Shape(test, f"a list of {length or 'any number of'} items, each {shape.says}")


def record(fields: Mapping[str, Shape]) -> Shape:
    """A map whose named fields (each may be absent) have their shapes."""
    return Shape(lambda v: isinstance(v, dict) and all(k not in v or s.test(v[k]) for k, s in fields.items()),
                 "a map of " + ", ".join(fields))


def described(value: Any) -> str:
    """What a value is, in a few words (never the value itself: it may be long or hostile)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Link):
        return "a link"
    if isinstance(value, int):
        return f"the number {value}" if abs(value) < 10**30 else "a number out of range"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, bytes):
        return "raw bytes"
    names: dict[type, str] = {str: "a string", list: "a list", dict: "a map"}
    return names.get(type(value), type(value).__name__)


def checked(obj: Any, what: str, fields: Mapping[str, Shape], *, kind: str | None = None,
            optional_fields: Collection[str] = ()) -> dict[str, Any]:
    """`obj` as a map whose fields have their shapes (and whose `type` is `kind`); BadShape says which does not."""
    if not isinstance(obj, dict):
        raise BadShape(f"{what} is {described(obj)}, not a map")
    if kind is not None and obj.get("type") != kind:
        raise BadShape(f"{what} is not a {kind} block")
    for name, shape in fields.items():
        if name not in obj:
            if name in optional_fields:
                continue
            raise BadShape(f"{what} has no {name!r}")
        if not shape.test(obj[name]):
            raise BadShape(f"{what}: {name!r} is {described(obj[name])}, not {shape.says}")
    return obj
