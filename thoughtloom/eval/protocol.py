"""The frozen run protocol (the manifest) and the parity audit that runs before any lane.

A protocol fixes everything a comparison depends on: data sets and problem ids, lanes and their
parameters, the model, the temperature, the per-problem budget, the seeds and the code version.
Lanes may differ only in what the protocol declares (`declared_differences`); the audit refuses
the run otherwise, so a lane cannot quietly win with a bigger budget or an easier problem set.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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

    def to_dict(self) -> dict[str, Any]:
        """The manifest: plain data, stable key order."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Protocol:
        """A protocol from a manifest dict (as written by to_dict)."""
        try:
            lanes = [LanePlan(**lane) for lane in data["lanes"]]
            rest = {k: v for k, v in data.items() if k != "lanes"}
            return cls(lanes=lanes, **rest)
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"not a bench manifest: {exc}") from None

    def fingerprint(self) -> str:
        """A hash of what the results depend on (the code version aside), to match resumed runs."""
        data = self.to_dict()
        data.pop("code_version", None)
        data.pop("data_dir", None)  # the same files may be mounted elsewhere on resume
        if not data.get("not_applicable"):
            data.pop("not_applicable", None)  # manifests from before the field existed match
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

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
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProtocolError(f"cannot read --protocol {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ProtocolError(f"--protocol {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"--protocol {path} must hold a JSON object")
    return data


def code_version() -> str:
    """The package version and the git commit it runs from ('+dirty' when the tree has changes)."""
    from .. import __version__

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "thoughtloom"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{head}{'.dirty' if dirty else ''}"
