"""What a stored run may use only when the user grants it again: model endpoints, files, tools, commands.

A stored run is data anyone may have written: an imported CAR, a manifest file, a store copied
from elsewhere. Its spec names model endpoints (where the user's API key would be sent), folders
and files to read, a search index to write, a test command to run in the sandbox, MCP servers to
start, and tools. Resume and replay rebuild the run from that spec, so before they use any of it
the caller must name each again (`Grants`; on the command line the same flags `loom solve`,
`loom agent` and `loom research` take). Only what the run will use counts: a replay asks no model
and runs no tool, so it needs only the files its task and grounding read. A named embedded model
(`local`, `local:NAME`: in-process, no network) and the calculator need no grant; a GGUF file
named by path does (it is a file the run would read); the docs and files tools need only their
folders granted.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..search.scorer import Scorer, scorer_name
from .options import ROLE_MODEL_OPTIONS, tool_names
from .spec import RunSpec, SpecError

#: Tools that need no grant of their own: exact arithmetic (no file, no network, no program), and the
#: tools that reach only what is granted for them (docs: --knowledge, files: --allow-read). The others
#: (python runs programs, mcp tools start servers) are named in --tools.
FREE_TOOLS = frozenset({"calc", "docs", "files"})


class GrantError(SpecError):
    """A stored run asks for something the caller did not grant again (one line: what, and how to grant it)."""

    def __init__(self, message: str, asked: tuple[Need, ...] = ()) -> None:
        super().__init__(message)
        #: Everything the run asks for (to show a person who may grant it all; see Grants.of).
        self.asked = asked


@dataclass(frozen=True, slots=True)
class Grants:
    """What the caller grants a resumed or replayed run, named again (not taken from the stored run)."""

    #: The run's model spec, when it is not a named embedded model.
    model: str | None = None
    #: (role, model spec) pairs for the roles the run runs on models of their own.
    role_models: tuple[tuple[str, str], ...] = ()
    knowledge: str | None = None
    knowledge_index: str | None = None
    #: Tools the run may call that need a grant of their own (python, mcp tools; see FREE_TOOLS).
    tools: tuple[str, ...] = ()
    read_roots: tuple[str, ...] = ()
    mcp_config: str | None = None
    tests: str | None = None
    data: str | None = None
    repo: str | None = None
    #: The debug task's test command, as `--test-command` takes it (one shell-quoted string).
    test_command: str | None = None
    #: The task file a run's task was read from (`loom solve --task-file`).
    task_file: str | None = None
    #: The run's scorer: its reference as `--scorer` takes it, or the function itself (Python).
    scorer: str | Scorer | None = None

    @classmethod
    def of(cls, asked: Sequence[Need]) -> Grants:
        """Grants of exactly what a run asks for (once a person has seen it all and said yes)."""
        values: dict[str, Any] = {}
        for need in asked:
            if need.field == "role_models":
                values["role_models"] = (*values.get("role_models", ()), (need.flag[2:-len("-model")], need.values[0]))
            elif need.field in ("read_roots", "tools"):
                values[need.field] = need.values
            elif need.field == "test_command":
                values[need.field] = shlex.join(need.values)
            else:
                values[need.field] = need.values[0]
        return cls(**values)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Grants:
        """The grants of `loom resume` / `loom replay`'s flags (names as the flags, dashes as underscores)."""
        return cls(
            model=options.get("model"),
            role_models=tuple((role, options[opt]) for opt, role in ROLE_MODEL_OPTIONS.items() if options.get(opt)),
            knowledge=options.get("knowledge"), knowledge_index=options.get("knowledge_index"),
            tools=tool_names(options.get("tools")),
            read_roots=tuple(options.get("allow_read") or ()), mcp_config=options.get("mcp_config"),
            tests=options.get("tests"), data=options.get("data"), repo=options.get("repo"),
            test_command=options.get("test_command"), task_file=options.get("task_file"),
            scorer=options.get("scorer"),
        )


@dataclass(frozen=True, slots=True)
class Need:
    """One thing a stored run asks for: what it is (for the user), and the flag and values that grant it."""

    what: str
    flag: str
    values: tuple[str, ...]
    #: The Grants field that grants it (the Python API's name for the flag).
    field: str

    def granted(self, grants: Grants) -> bool:
        """Whether `grants` names exactly this."""
        given = getattr(grants, self.field)
        if self.field == "model":
            return given is not None and same_model(given, self.values[0])
        if self.field == "role_models":
            return any(f"--{r}-model" == self.flag and same_model(m, self.values[0]) for r, m in given)
        if self.field == "read_roots":
            return {os.path.abspath(r) for r in given} == {os.path.abspath(r) for r in self.values}
        if self.field == "tools":
            return set(given) - FREE_TOOLS == set(self.values) - FREE_TOOLS
        if self.field == "test_command":
            return given is not None and _split(given) == list(self.values)
        if self.field == "scorer":
            return given is not None and scorer_name(given) == self.values[0]
        return given is not None and os.path.abspath(given) == os.path.abspath(self.values[0])

    def flags(self) -> str:
        """The flag(s) that grant it, shell-quoted."""
        if self.field == "tools":
            return f"{self.flag} {shlex.quote(','.join(self.values))}"
        if self.field == "test_command":
            return f"{self.flag} {shlex.quote(shlex.join(self.values))}"
        return " ".join(f"{self.flag} {shlex.quote(v)}" for v in self.values)

    def keyword(self) -> str:
        """The Grants field that grants it, as Python."""
        if self.field == "read_roots":
            return f"read_roots={self.values!r}"
        if self.field == "role_models":
            return f"role_models=(({self.flag[2:-len('-model')]!r}, {self.values[0]!r}),)"
        if self.field == "tools":
            return f"tools={tuple(n for n in self.values if n not in FREE_TOOLS)!r}"
        if self.field == "test_command":
            return f"test_command={shlex.join(self.values)!r}"
        return f"{self.field}={self.values[0]!r}"


def needs(spec: RunSpec, *, live: bool) -> list[Need]:
    """What the stored run's spec asks for that must be granted again; `live`: resume (a model is asked,
    tools run), else replay (only the files the task and its grounding read)."""
    out: list[Need] = []
    if live:
        if isinstance(spec.model, str) and _needs_grant(spec.model):
            out.append(Need(f"model {_described(spec.model)}", "--model", (spec.model,), "model"))
        for role, model in spec.role_models:
            if _needs_grant(model):
                out.append(Need(f"{role} model {_described(model)}", f"--{role}-model", (model,), "role_models"))
        if out:  # what a granted model may be charged is the budget the run's writer set: said where it is granted
            last = out[-1]
            out[-1] = replace(last, what=f"{last.what} (under the run's stored budget: {spec.budget.text()})")
    tool_run = spec.needs.tools
    if spec.knowledge is not None and (live or not tool_run):
        out.append(Need(f"the documents in {spec.knowledge}", "--knowledge", (spec.knowledge,), "knowledge"))
        if spec.knowledge_index is not None:
            out.append(Need(f"the search index {spec.knowledge_index}", "--knowledge-index",
                            (spec.knowledge_index,), "knowledge_index"))
    if live and tool_run:
        if set(spec.tools) - FREE_TOOLS:
            listed = ", ".join(t for t in spec.tools if t not in FREE_TOOLS)
            out.append(Need(f"tools {listed}", "--tools", spec.tools, "tools"))
        if spec.read_roots:
            out.append(Need(f"read access to {', '.join(spec.read_roots)}", "--allow-read", spec.read_roots,
                            "read_roots"))
        if spec.mcp_config is not None:
            out.append(Need(f"the MCP servers of {spec.mcp_config}", "--mcp-config", (spec.mcp_config,),
                            "mcp_config"))
    if spec.task_file is not None and isinstance(spec.task, str):
        # The file's prompts make the run's requests, so a replay reads it too.
        out.append(Need(f"the task file {spec.task_file}", "--task-file", (spec.task_file,), "task_file"))
    if spec.scorer is not None:
        # Its scores make the run's graph, so a replay calls it too.
        out.append(Need(f"the scorer {spec.scorer.name}", "--scorer", (spec.scorer.name,), "scorer"))
    options = spec.task_options
    for name, what in (("tests", "the tests in"), ("data", "the data file"), ("repo", "the repository")):
        value = getattr(options, name)
        if value is not None:
            out.append(Need(f"{what} {os.fspath(value)}", f"--{name}", (os.fspath(value),), name))
    if options.test_command is not None:
        out.append(Need(f"the test command {shlex.join(options.test_command)}", "--test-command",
                        tuple(options.test_command), "test_command"))
    return out


#: Options of a run stored before specs that building its spec from them reads or imports (the task file, the
#: tests, the data, the repository, the scorer's module): (option, flag, what the user is told).
_READ_WHILE_BUILDING = (("task_file", "--task-file", "the task file"), ("tests", "--tests", "the tests in"),
                        ("data", "--data", "the data file"), ("repo", "--repo", "the repository"),
                        ("scorer", "--scorer", "the scorer"))


def check_before_building(options: Mapping[str, Any], grants: Grants, *, cli: bool = False) -> None:
    """Refuse (GrantError, one line) a run stored before specs whose options name a file or code that building
    its spec would read or import, unless `grants` names it again: checked before anything is read, as
    `check_grants` checks the rest once the spec is built."""
    asked = []
    for option, flag, what in _READ_WHILE_BUILDING:
        value = options.get(option)
        if value is None:
            continue
        if not isinstance(value, str):
            raise SpecError(f"the stored run's option {option} must be text; got {type(value).__name__}")
        asked.append(Need(f"{what} {value}", flag, (value,), option))
    missing = [n for n in asked if not n.granted(grants)]
    if missing:
        raise _refusal(missing, cli)


def grant_flags(spec: RunSpec, *, live: bool = True) -> str:
    """The flags that grant a stored run what it asks for (a hint such as "then 'loom resume RUN ...'")."""
    return " ".join(n.flags() for n in needs(spec, live=live))


def check_grants(spec: RunSpec, grants: Grants, *, live: bool, cli: bool = False) -> None:
    """Refuse (GrantError, one line) unless `grants` names exactly what the stored run asks for.

    cli: the line names the command line's flags (else the Python API's Grants fields).
    """
    asked = needs(spec, live=live)
    given = _given(grants)
    if all(n.granted(grants) for n in asked) and given <= {n.field for n in asked}:
        return
    if asked:
        raise _refusal(asked, cli)
    extra = _flag_names(given) if cli else ", ".join(sorted(given))
    raise GrantError(f"this run asks for no model endpoint, file or tool; leave out {extra}")


def _refusal(asked: Sequence[Need], cli: bool) -> GrantError:
    """The one-line refusal naming what a stored run asks for and how to grant it (flags, or Grants fields)."""
    how = " ".join(n.flags() for n in asked) if cli else f"grants=Grants({', '.join(n.keyword() for n in asked)})"
    return GrantError(f"this run asks for {' and '.join(n.what for n in asked)}; a stored run gets none of them "
                      f"unless you name them again, exactly: {how}", tuple(asked))


def chosen(grants: Grants, model: str | None, role_models: Sequence[tuple[str, str]]) -> Grants:
    """A fork's grants: the models the caller chose for it are its settings, named by the caller, so they count
    as granted (those that need a grant) in place of whatever `grants` names for those models."""
    if model is not None:
        grants = replace(grants, model=model if _needs_grant(model) else None)
    if role_models:
        roles = {r for r, _ in role_models}
        kept = tuple((r, m) for r, m in grants.role_models if r not in roles)
        grants = replace(grants, role_models=(*kept, *((r, m) for r, m in role_models if _needs_grant(m))))
    return grants


def _given(grants: Grants) -> set[str]:
    """The Grants fields that name something (tools that need no grant of their own do not count)."""
    out = {name for name in ("model", "knowledge", "knowledge_index", "mcp_config", "tests", "data", "repo",
                             "test_command", "task_file", "scorer") if getattr(grants, name) is not None}
    out |= {name for name in ("role_models", "read_roots") if getattr(grants, name)}
    if set(grants.tools) - FREE_TOOLS:
        out.add("tools")
    return out


def _flag_names(fields: set[str]) -> str:
    names = {"read_roots": "--allow-read", "role_models": "--ROLE-model"}
    return ", ".join(sorted(names.get(f, "--" + f.replace("_", "-")) for f in fields))


def _needs_grant(model: str) -> bool:
    """Whether a model spec reaches beyond the named embedded models (a remote server, a file by path)."""
    from ..llm.errors import ModelError
    from ..llm.registry import parse_model_spec

    try:
        parsed = parse_model_spec(model)
    except (ModelError, ValueError):
        # A Backend object's name (the Python API): nothing the spec could reach; building it fails later.
        return False
    return parsed.embedded is None


def _described(model: str) -> str:
    """A model spec shown in full: with the server it reaches (from the environment for openai:, ollama:, ...)."""
    from ..llm.registry import parse_model_spec

    parsed = parse_model_spec(model)
    if parsed.is_local:
        return f"file {parsed.model}"
    return model if parsed.base_url is None or parsed.base_url in model else f"{model} at {parsed.base_url}"


def same_model(given: str, asked: str) -> bool:
    """Whether two model specs name the same model (the same identity: a default URL given or not)."""
    from ..llm.errors import ModelError
    from ..llm.registry import parse_model_spec

    try:
        return parse_model_spec(given).identity == parse_model_spec(asked).identity
    except (ModelError, ValueError):
        return given.strip() == asked.strip()


def _split(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


__all__ = ["FREE_TOOLS", "GrantError", "Grants", "Need", "check_grants", "chosen", "grant_flags", "needs", "same_model"]
