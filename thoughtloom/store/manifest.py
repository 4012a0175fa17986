"""The run manifest: everything needed to run a stored search again, as a block and as a JSON file.

A manifest names the model (the spec string the user gave and the backend's recorded identity,
concurrency and batching), the task (name, options, problem text), the SearchConfig, the budget
limits, the controller profile, the seed, the code (thoughtloom version and git commit when the
package runs from a checkout), and sha256 hashes of the task's prompt templates: the source of
every thoughtloom.tasks module in the task class's MRO, so a replay can say "the prompts changed
since the run" when it diverges. It keeps the run's whole spec (`spec`: task and options, model,
search config, budget, profile, controller settings and automatic answers, grounding), so resume
and replay rebuild the identical search however it was started; runs stored before that keep
`loom solve`'s parsed options (`cli`) instead, which rebuild the same spec.

The block form is written once when a run starts and again (with `calls` set) when it finishes;
heads link the current one. The JSON file form (`loom export RUN --manifest FILE`) adds the CIDs
of the head, graph and recorded-calls list it was written from, so `loom replay FILE` knows what
to reproduce; the blocks themselves must be in the store (`loom import` a CAR first).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..grounding.files import FileRefused, read_utf8
from .shapes import BOOL, CID_TEXT, COUNT, LINK, MAP, TEXT, TIME, WHOLE, BadShape, Shape, checked, optional

MANIFEST_FORMAT = "thoughtloom-run-manifest/1"


class ManifestError(ValueError):
    """A manifest file that cannot be read (one line, names the file)."""


@dataclass(slots=True)
class Manifest:
    """What a run was: model, task, problem, parameters, code version and prompt hashes."""

    run_id: str
    model: str  # the spec string ("local", "openai:gpt-4o-mini", ...) or, from the API, the backend name
    backend: str  # the backend's identity as recorded in cache keys and call records
    max_concurrency: int
    supports_batch: bool
    task: str
    problem: str
    config: dict[str, Any]
    budget: dict[str, Any]
    task_options: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    seed: int | None = None
    version: str = ""
    commit: str | None = None
    prompt_hashes: dict[str, str] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    #: The run's spec (thoughtloom.run.spec.RunSpec.to_dict): how resume and replay rebuild it.
    spec: dict[str, Any] | None = None
    #: Runs stored before specs were: `loom solve`'s parsed options (None for Python API runs).
    cli: dict[str, Any] | None = None
    #: CID of the recorded-calls list (set in the manifest written when the run finishes).
    calls: str | None = None
    #: In JSON files only: the head and graph the file was written from.
    head: str | None = None
    graph: str | None = None

    def to_obj(self) -> dict[str, Any]:
        """The dag-cbor form (CIDs as links; head and graph left out: heads link the manifest)."""
        from .blocks import link

        obj = {k: v for k, v in asdict(self).items() if k not in ("head", "graph", "calls")}
        obj["type"] = "manifest"
        obj["calls"] = link(self.calls) if self.calls else None
        return obj

    @classmethod
    def from_obj(cls, obj: Any, what: str = "manifest") -> Manifest:
        """Read the dag-cbor form back (unknown keys ignored, so newer manifests still load; BadShape
        names a field that is missing or of the wrong type)."""
        data = _fields(checked(obj, what, {**FIELDS, "calls": optional(LINK)}, kind="manifest",
                               optional_fields=OPTIONAL))
        calls = data.get("calls")
        data["calls"] = str(calls) if calls is not None else None
        return cls(**data)

    def to_json(self) -> str:
        """The JSON file form."""
        return json.dumps({"format": MANIFEST_FORMAT, **asdict(self)}, indent=2, ensure_ascii=False)

    @classmethod
    def load_json(cls, path: str | os.PathLike[str]) -> Manifest:
        """Read a manifest file; ManifestError with one line when it is not one."""
        try:
            data = json.loads(read_utf8(path))
        except FileRefused as exc:
            raise ManifestError(f"cannot read manifest {path}: {exc.reason}") from None
        except ValueError as exc:
            raise ManifestError(f"{path} is not a run manifest (not JSON: {exc})") from None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            raise ManifestError(f"{path} is not a run manifest (no \"format\": \"{MANIFEST_FORMAT}\")")
        try:
            return cls(**_fields(checked(data, str(path), FIELDS, optional_fields=OPTIONAL)))
        except BadShape as exc:
            raise ManifestError(f"{exc} (not a run manifest written by 'loom export')") from None


#: The type of every manifest field (a string CID for calls, head and graph: the JSON file form).
FIELDS: dict[str, Shape] = {
    "run_id": TEXT, "model": TEXT, "backend": TEXT, "max_concurrency": COUNT, "supports_batch": BOOL, "task": TEXT,
    "problem": TEXT, "config": MAP, "budget": MAP, "task_options": MAP, "profile": optional(TEXT),
    "seed": optional(WHOLE), "version": TEXT, "commit": optional(TEXT), "prompt_hashes": MAP, "created_at": TIME,
    "spec": optional(MAP), "cli": optional(MAP), "calls": optional(CID_TEXT), "head": optional(CID_TEXT),
    "graph": optional(CID_TEXT),
}
#: The fields a manifest may lack (they have defaults; older runs did not store them all).
OPTIONAL = frozenset(f.name for f in fields(Manifest) if f.default is not MISSING or f.default_factory is not MISSING)


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    """The manifest's own fields of checked data (unknown keys left out)."""
    return {k: v for k, v in data.items() if k in FIELDS}


def code_version() -> tuple[str, str | None]:
    """thoughtloom's version and, when it runs from a checkout of thoughtloom, the commit (with '+dirty')."""
    from .._version import __version__
    from ..checkout import running_checkout

    checkout = running_checkout()
    if checkout is None:
        return __version__, None
    return __version__, checkout.commit + ("+dirty" if checkout.dirty else "")


def prompt_hashes(task: Any) -> dict[str, str]:
    """sha256 of the source of each thoughtloom.tasks module the task's class is built from."""
    out: dict[str, str] = {}
    for klass in type(task).__mro__:
        module = sys.modules.get(klass.__module__)
        path = getattr(module, "__file__", None)
        if not klass.__module__.startswith("thoughtloom.tasks") or path is None or klass.__module__ in out:
            continue
        try:
            out[klass.__module__] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            continue
    return out


def plain_options(options: Any) -> dict[str, Any]:
    """A task's options (TaskOptions or a dict) as JSON-ready data: paths as strings, unset left out."""
    if options is None:
        return {}
    data = options if isinstance(options, dict) else {
        f.name: getattr(options, f.name) for f in fields(options)
    }
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif hasattr(value, "__dataclass_fields__"):
            value = asdict(value)
        out[key] = value
    return out
