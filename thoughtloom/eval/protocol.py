"""The frozen run protocol (the manifest) and the parity audit that runs before any lane.

A protocol fixes everything a comparison depends on: data sets and problem ids, lanes and their
parameters, the model, the temperature, the per-problem budget, the seeds and the code version.
Lanes may differ only in what the protocol declares (`declared_differences`); the audit refuses
the run otherwise, so a lane cannot quietly win with a bigger budget or an easier problem set.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..grounding.files import FileRefused, read_utf8
from ..llm.budget import Pricing

#: What every lane must share unless the protocol declares the difference.
PARITY_FIELDS = ("model", "temperature", "budget_tokens", "budget_calls", "budget_usd", "budget_seconds",
                 "seed", "problems")


class ProtocolError(ValueError):
    """A protocol that cannot be read or run (bad field, unknown lane)."""


class AuditError(ValueError):
    """The parity audit refused the run: lanes differ in something the protocol does not declare."""


@dataclass(frozen=True, slots=True)
class LanePlan:
    """One lane as it will run: its parameters and every setting the audit compares."""

    lane: str
    params: dict[str, Any]
    model: str
    temperature: float
    budget_tokens: int | None
    budget_calls: int | None
    budget_usd: float | None
    budget_seconds: float | None
    seed: int | None
    #: data set -> problem ids this lane runs
    problems: dict[str, list[str]]


@dataclass(slots=True)
class Protocol:
    """Everything a benchmark run is fixed by; `to_dict` is the manifest."""

    tasks: list[str]
    problems: dict[str, list[str]]
    lanes: list[LanePlan]
    model: str
    temperature: float
    budget_tokens: int | None
    budget_calls: int | None = None
    budget_usd: float | None = None
    budget_seconds: float | None = None
    seed: int | None = 0
    selection: str = "spread"
    data_dir: str | None = None
    declared_differences: list[str] = field(default_factory=list)
    code_version: str = ""
    #: data set -> lane -> why that lane cannot run on it (e.g. tot on sorting: no step prompts)
    not_applicable: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The user's price of `model` in USD per million input / output tokens (--price-in/--price-out):
    #: what a dollar budget and the report's cost are counted at (None: the known price list's, if any).
    price_in: float | None = None
    price_out: float | None = None
    #: Roles of the search lanes that support them (eval/lanes.py:role_lane) run on a model of their own:
    #: {"evaluator": "local:qwen2.5-coder-1.5b", ...}; every other call goes to `model`.
    role_models: dict[str, str] = field(default_factory=dict)
    #: How a user's own data sets ("TASK:FILE") are read and scored: {"fields": {ROLE: FIELD}, "metric": NAME,
    #: "shots": FILE} (eval/datasets.Labels; empty when none is set).
    labels: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The manifest: plain data, stable key order."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Protocol:
        """A protocol from a manifest dict (as written by to_dict)."""
        try:
            lanes = [LanePlan(**lane) for lane in data["lanes"]]
            rest = {k: v for k, v in data.items() if k != "lanes"}
            protocol = cls(lanes=lanes, **rest)
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"not a bench manifest: {exc}") from None
        # A hand-edited manifest gets the checks a protocol file gets.
        for where, plan in (("", protocol), *((f"lane {p.lane}: ", p) for p in protocol.lanes)):
            for key in LANE_FIELDS:
                value = getattr(plan, key)
                wanted = _problem_sets(value) if key == "problems" else FIELD_CHECKS[key](value)
                if wanted:
                    raise ProtocolError(
                        f"not a bench manifest: {where}{key} must be {wanted}; got {json.dumps(value)[:60]}"
                    )
        return protocol

    @classmethod
    def load(cls, path: Path) -> Protocol:
        """The protocol a run directory's manifest file holds (ProtocolError if it cannot be read as one)."""
        try:
            data = json.loads(read_utf8(path))
        except FileRefused as exc:
            raise ProtocolError(str(exc)) from None
        except ValueError as exc:
            raise ProtocolError(f"{path} is not a bench manifest: {exc}") from None
        if not isinstance(data, dict):
            raise ProtocolError(f"{path} is not a bench manifest (not a JSON object)")
        return cls.from_dict(data)

    def fingerprint(self) -> str:
        """A hash of what the results depend on (the code version aside), to match resumed runs."""
        data = self.to_dict()
        data.pop("code_version", None)
        data.pop("data_dir", None)  # the same files may be mounted elsewhere on resume
        if not data.get("not_applicable"):
            data.pop("not_applicable", None)  # manifests from before the field existed match
        for key in ("price_in", "price_out"):
            if data.get(key) is None:
                data.pop(key, None)  # likewise for runs without a price of the user's
        if not data.get("role_models"):
            data.pop("role_models", None)  # and for runs with no role on a model of its own
        if not data.get("labels"):
            data.pop("labels", None)  # and for runs of data sets that need no labels
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def pricing(self) -> Pricing | None:
        """The user's price of the protocol's model (None when not given)."""
        if self.price_in is None or self.price_out is None:
            return None
        return Pricing(self.price_in, self.price_out)

    def lane_pricing(self, lane: LanePlan) -> Pricing | None:
        """What a lane's tokens cost: the user's price for the protocol's model, else its model's known
        price; None when unknown (never $0)."""
        from ..run.spec import model_pricing

        return model_pricing(lane.model, self.pricing if lane.model == self.model else None)

    def plan(self, lane: str) -> LanePlan:
        """The plan of one lane."""
        for p in self.lanes:
            if p.lane == lane:
                return p
        raise KeyError(lane)

    def runs(self, task: str, lane: str) -> bool:
        """Whether the lane runs on this data set."""
        return lane not in self.not_applicable.get(task, {})

    def seed_for(self, lane: LanePlan, index: int) -> int | None:
        """The seed of the index-th problem: equal across lanes, different across problems."""
        return None if lane.seed is None else lane.seed + index


def audit(protocol: Protocol) -> list[str]:
    """The parity audit: raise AuditError on an undeclared difference; return the checks that passed."""
    if not protocol.lanes:
        raise AuditError("parity audit failed: the protocol has no lanes")
    names = [p.lane for p in protocol.lanes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise AuditError(f"parity audit failed: lane {dup} appears twice")
    unknown = [d for d in protocol.declared_differences if d not in PARITY_FIELDS]
    if unknown:
        raise AuditError(f"parity audit failed: cannot declare {unknown[0]!r}; declarable: {', '.join(PARITY_FIELDS)}")
    passed = []
    ref = protocol.lanes[0]
    for name in PARITY_FIELDS:
        if name in protocol.declared_differences:
            passed.append(f"{name}: differs by declaration")
            continue
        for plan in protocol.lanes[1:]:
            if getattr(plan, name) != getattr(ref, name):
                raise AuditError(
                    f"parity audit failed: lane {plan.lane} has {name} {_show(getattr(plan, name))} but lane "
                    f"{ref.lane} has {_show(getattr(ref, name))} (declare {name} in declared_differences to allow it)"
                )
        passed.append(f"{name}: equal across {len(protocol.lanes)} lanes")
    # The lanes must also run exactly what the protocol's header says they run.
    for plan in protocol.lanes:
        for name in ("model", "temperature", "budget_tokens", "seed"):
            if name not in protocol.declared_differences and getattr(plan, name) != getattr(protocol, name):
                raise AuditError(
                    f"parity audit failed: lane {plan.lane} has {name} {_show(getattr(plan, name))} but the "
                    f"protocol says {_show(getattr(protocol, name))}"
                )
        if "problems" not in protocol.declared_differences and plan.problems != protocol.problems:
            raise AuditError(f"parity audit failed: lane {plan.lane} runs a different problem set than the protocol")
    if protocol.budget_tokens is None and protocol.budget_calls is None and protocol.budget_usd is None:
        raise AuditError("parity audit failed: no per-problem budget (give --budget-tokens, calls or usd)")
    return passed


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return f"({sum(len(v) for v in value.values())} problems)"
    return repr(value)


def load_protocol_file(path: str | Path) -> dict[str, Any]:
    """A protocol file (JSON): the manifest's fields, lanes as names or {lane, params, overrides}."""
    try:
        data = json.loads(read_utf8(path, what="--protocol"))
    except FileRefused as exc:
        raise ProtocolError(str(exc)) from None
    except ValueError as exc:
        raise ProtocolError(f"--protocol {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"--protocol {path} must hold a JSON object")
    return data


#: Largest seed a protocol takes: problem i runs with seed + i, and backends take 32-bit seeds.
MAX_SEED = 2**32 - 1


def _names(value: Any) -> str | None:
    ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) and v for v in value))
    return None if ok else "a list of names (or one comma-separated string)"


def _positive_int(value: Any) -> str | None:
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
    return None if ok else "a whole number of at least 1 (or null)"


def _positive_number(value: Any) -> str | None:
    ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                           and math.isfinite(value) and value > 0)
    return None if ok else "a finite number above 0 (or null)"


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "a non-empty string"


def _temperature(value: Any) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 2.0
    return None if ok else "a number from 0 to 2"


def _seed(value: Any) -> str | None:
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED)
    return None if ok else f"a whole number from 0 to {MAX_SEED} (or null)"


def _problem_sets(value: Any) -> str | None:
    ok = isinstance(value, dict) and all(_names(v) is None and not isinstance(v, str) for v in value.values())
    return None if ok else "an object of data set -> [problem ids]"


def _lane_params(value: Any) -> str | None:
    ok = isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())
    return None if ok else 'an object of lane -> {parameter: value}, e.g. {"cot_sc": {"k": 5}}'


def _price(value: Any) -> str | None:
    ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1e12)
    return None if ok else "a price in USD per million tokens, at least 0 (or null)"


def _role_models(value: Any) -> str | None:
    from ..search.config import OPERATOR_ROLES

    ok = isinstance(value, dict) and all(r in OPERATOR_ROLES and isinstance(m, str) and m.strip()
                                         for r, m in value.items())
    return None if ok else f'an object of role -> model spec, the roles {", ".join(OPERATOR_ROLES)}'


def _labels(value: Any) -> str | None:
    fields = value.get("fields", {}) if isinstance(value, dict) else None
    ok = (isinstance(value, dict) and set(value) <= {"fields", "metric", "shots"} and isinstance(fields, dict)
          and all(r in ("problem", "answer", "id") and isinstance(f, str) and f for r, f in fields.items())
          and all(isinstance(value.get(k), str) for k in ("metric", "shots") if value.get(k) is not None))
    return None if ok else ('an object {"fields": {"problem" | "answer" | "id": FIELD}, "metric": NAME, '
                            '"shots": FILE}')


def _data_dir(value: Any) -> str | None:
    return None if value is None or (isinstance(value, str) and value) else "a directory path (or null)"


#: What each field of a protocol file must hold (None: fine; else what it should be).
FIELD_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "tasks": _names, "ids": _names, "declared_differences": _names, "model": _text, "selection": _text,
    "limit": _positive_int, "budget_tokens": _positive_int, "budget_calls": _positive_int,
    "budget_usd": _positive_number, "budget_seconds": _positive_number, "temperature": _temperature,
    "seed": _seed, "data_dir": _data_dir, "lane_params": _lane_params, "problems": _names,
    "price_in": _price, "price_out": _price, "role_models": _role_models, "labels": _labels,
}
#: Settings one lane of a protocol file may set apart from the others (the audit then needs them declared).
LANE_FIELDS = ("model", "temperature", "budget_tokens", "budget_calls", "budget_usd", "budget_seconds", "seed",
               "problems")


def check_fields(data: dict[str, Any], where: str) -> None:
    """ProtocolError naming the first field of a protocol file with an unknown name or a value of the wrong kind."""
    known = {*FIELD_CHECKS, "lanes"} - {"problems"}
    for key, value in data.items():
        if key not in known:
            raise ProtocolError(f"{where}: unknown field {key!r}; known: {', '.join(sorted(known))}")
        if key == "lanes":
            _check_lanes(value, where)
            continue
        wanted = FIELD_CHECKS[key](value)
        if wanted:
            raise ProtocolError(f"{where}: {key} must be {wanted}; got {json.dumps(value)[:60]}")


def _check_lanes(value: Any, where: str) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise ProtocolError(f"{where}: lanes must be a list of lane names or {{\"lane\": NAME, ...}} objects")
    for entry in value:
        if isinstance(entry, str) and entry:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("lane"), str) or not entry["lane"]:
            raise ProtocolError(
                f'{where}: a lane is a name or an object with a "lane" field; got {json.dumps(entry)[:60]}'
            )
        for key, setting in entry.items():
            if key == "lane":
                continue
            if key == "params":
                if not isinstance(setting, dict):
                    raise ProtocolError(f"{where}: lane {entry['lane']}: params must be an object")
                continue
            if key not in LANE_FIELDS:
                raise ProtocolError(f"{where}: lane {entry['lane']}: unknown setting {key!r}; known: params, "
                                    f"{', '.join(LANE_FIELDS)}")
            wanted = FIELD_CHECKS[key](setting)
            if wanted:
                raise ProtocolError(f"{where}: lane {entry['lane']}: {key} must be {wanted}; "
                                    f"got {json.dumps(setting)[:60]}")


def code_version() -> str:
    """The package version and the git commit it runs from ('.dirty' when the package's files changed)."""
    from .._version import __version__
    from ..checkout import running_checkout

    checkout = running_checkout()
    if checkout is None:
        return __version__
    return f"{__version__}+{checkout.commit[:12]}{'.dirty' if checkout.dirty else ''}"
