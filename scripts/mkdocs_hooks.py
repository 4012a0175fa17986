"""MkDocs hooks of the documentation site (mkdocs.yml): the pages written in the repository, read on the site.

- A line `<!-- include PATH -->` in a page under docs/ is replaced by that file (README.md, ARCHITECTURE.md,
  BENCHMARKS.md live at the repository's root, where GitHub shows them; the site shows them without a copy).
- Relative links are written for GitHub (`../BENCHMARKS.md#15-...`, `docs/search.md`): each is rewritten to
  the site page that shows the file; a link to a file the site does not show (an example's source) becomes
  its text, so `mkdocs build --strict` fails only on a link that names nothing.
- `docs/cli-reference.md` gets the reference of every `loom` command, generated from the argparse parsers
  of thoughtloom.cli (so it cannot drift from the code).
- `docs/api.md` gets one mkdocstrings block per name `thoughtloom` exports; every one must have a docstring,
  and so must the public methods its classes define: one missing is a warning, which --strict makes a failure.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Files outside docs/ that a page of the site shows (through an include), by their path in the repository.
SHOWN_ELSEWHERE = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "architecture.md",
    "BENCHMARKS.md": "benchmarks.md",
    "examples/README.md": "examples.md",
    "examples": "examples.md",
}
CLI_PAGE = "cli-reference.md"
CLI_MARKER = "<!-- loom-cli-reference -->"
API_PAGE = "api.md"
API_MARKER = "<!-- thoughtloom-api-reference -->"
_INCLUDE = re.compile(r"^<!--\s*include\s+(\S+)\s*-->\s*$")
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
log = logging.getLogger("mkdocs.plugins.thoughtloom")


def on_config(config: Any) -> None:
    """The checkout's own thoughtloom documents itself (as mkdocstrings reads it: `paths: [.]`)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def on_pre_build(config: Any) -> None:
    """Warn about every name of the public API (thoughtloom.__all__) that has no docstring."""
    for problem in missing_docstrings():
        log.warning("API reference: %s has no docstring", problem)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """A page's Markdown as the site shows it: includes expanded, links mapped, the CLI reference generated."""
    uri = page.file.src_uri
    out: list[str] = []
    for line in markdown.splitlines():
        m = _INCLUDE.match(line)
        if m is None:
            out.append(line)
            continue
        source = (DOCS / posixpath.dirname(uri) / m.group(1)).resolve()
        out.append(rewrite_links(source.read_text(encoding="utf-8"), source.relative_to(ROOT).as_posix(), uri))
    text = "\n".join(out)
    if uri == CLI_PAGE:
        text = text.replace(CLI_MARKER, cli_reference())
    if uri == API_PAGE:
        text = text.replace(API_MARKER, api_reference())
    return rewrite_links(text, f"docs/{uri}", uri)


def site_page(repo_path: str) -> str | None:
    """The site page (a path under docs/) that shows a file of the repository, or None."""
    if repo_path in SHOWN_ELSEWHERE:
        return SHOWN_ELSEWHERE[repo_path]
    if repo_path.startswith("docs/") and repo_path.endswith(".md"):
        return repo_path.removeprefix("docs/")
    return None


def rewrite_links(markdown: str, written_in: str, shown_in: str) -> str:
    """Relative links written in the repository file `written_in` rewritten for the site page `shown_in`."""
    # Prose between fenced blocks is rewritten as a whole: a link's text may run over two lines.
    fenced = False
    out: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        if prose:
            out.append(_LINK.sub(lambda m: _link(m, written_in, shown_in), "\n".join(prose)))
            prose.clear()

    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            flush()
            fenced = not fenced
            out.append(line)
        elif fenced:
            out.append(line)
        else:
            prose.append(line)
    flush()
    return "\n".join(out)


def _link(m: re.Match[str], written_in: str, shown_in: str) -> str:
    target = m.group("target")
    if "://" in target or target.startswith(("mailto:", "#")):
        return m.group(0)
    path, _, anchor = target.partition("#")
    repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(written_in), path))
    page = site_page(repo_path)
    if page is None:
        if (ROOT / repo_path).exists():
            return m.group("text")  # a source file or folder: the site does not show it, its name stays
        return m.group(0)  # names nothing: left for the build to report
    relative = posixpath.relpath(page, posixpath.dirname(shown_in) or ".")
    return f"[{m.group('text')}]({relative}{'#' + anchor if anchor else ''})"


def cli_reference() -> str:
    """Every `loom` command (and nested command) with its usage and options, from the argparse parsers."""
    from thoughtloom.cli.main import build_parser

    parser = build_parser()
    sections: list[str] = []
    for name, command, help_text in commands(parser):
        sections.append(_command_section(name, command, help_text))
    return "\n\n".join(sections)


def api_reference() -> str:
    """One mkdocstrings block per name thoughtloom exports, by the module that defines it."""
    import thoughtloom
    from thoughtloom import _EXPORTS

    blocks = []
    for name, module in _EXPORTS.items():
        obj = getattr(thoughtloom, name)
        # A wrapper made at import (`solve = _blocking(asolve)`) is an attribute to the static reader:
        # its signature and docstring are read from the object itself.
        if hasattr(obj, "__wrapped__"):
            blocks.append(f"## `{name}`\n\n```python\n{_signature(name, obj)}\n```\n\n{inspect.getdoc(obj)}")
        else:
            blocks.append(f"::: {module}.{name}")
    return "\n\n".join(blocks)


class _Text(str):
    """An annotation kept as text (`from __future__ import annotations`), shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


def _signature(name: str, function: Any) -> str:
    """`name(...)` with one parameter a line, as mkdocstrings shows a signature."""
    signature = inspect.signature(function)

    def text(annotation: Any) -> Any:
        return _Text(annotation) if isinstance(annotation, str) else annotation

    parameters: list[str] = []
    starred = False  # a bare `*` goes before the first keyword-only parameter, unless `*args` is there
    for p in signature.parameters.values():
        starred = starred or p.kind is p.VAR_POSITIONAL
        if p.kind is p.KEYWORD_ONLY and not starred:
            parameters.append("*")
            starred = True
        parameters.append(str(p.replace(annotation=text(p.annotation))))
    returns = signature.return_annotation
    tail = "" if returns is inspect.Signature.empty else f" -> {text(returns)!r}"
    return f"{name}(\n" + "".join(f"    {p},\n" for p in parameters) + f"){tail}"


def commands(parser: argparse.ArgumentParser, prefix: str = "loom",
             help_text: str = "") -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(full name, parser, one-line help) of a parser and every subcommand under it, depth first."""
    found = [(prefix, parser, help_text)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found += commands(sub, f"{prefix} {name}", helps.get(name, ""))
    return found


def _command_section(name: str, parser: argparse.ArgumentParser, help_text: str) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    lines = [f"## `{name}`", ""]
    summary = parser.description or help_text
    if summary:
        lines += [_escape(summary), ""]
    lines += ["```text", formatter.format_help().strip(), "```", ""]
    rows = [_option_row(a) for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)]
    if rows:
        lines += ["| argument | description |", "|---|---|", *rows]
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        lines += ["", "Commands: " + ", ".join(f"[`{name} {c}`](#{_slug(f'{name} {c}')})" for c in action.choices)]
    return "\n".join(lines)


def _slug(heading: str) -> str:
    """The anchor of a heading, as the site's toc (pymdownx.slugs, lower case) and GitHub write it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _option_row(action: argparse.Action) -> str:
    if action.option_strings:
        flags = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (action.dest.upper() if not action.choices else None)
            flags += f" {metavar}" if metavar else " {" + ",".join(map(str, action.choices or [])) + "}"
    else:
        flags = str(action.metavar or action.dest)
    text = action.help or ""
    if action.choices and action.option_strings and action.metavar:
        text += f" (one of: {', '.join(map(str, action.choices))})"
    if action.default not in (None, False, argparse.SUPPRESS, [], 0) and "%(default)" not in text \
            and "default" not in text:
        text += f" (default: {action.default})"
    text = text.replace("%(default)s", str(action.default)).replace("%%", "%")
    return f"| `{flags}` | {_escape(text)} |"


def _escape(text: str) -> str:
    """Plain help text in a Markdown table cell: pipes, angle brackets and line breaks made literal."""
    return (" ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
            .replace("*", "\\*").replace("_", "\\_").replace("[", "\\["))


def missing_docstrings() -> list[str]:
    """The public names of thoughtloom (and public methods their classes define) without a docstring."""
    import thoughtloom

    missing: list[str] = []
    for name in thoughtloom.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(thoughtloom, name)
        doc = (obj.__doc__ or "").strip()
        # A dataclass without a docstring gets its signature as one; an Enum, a generic sentence.
        if not doc or doc.startswith(f"{getattr(obj, '__name__', '')}(") or doc == "An enumeration.":
            missing.append(f"thoughtloom.{name}")
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if member.startswith("_"):
                    continue
                function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if inspect.isfunction(function) and not (function.__doc__ or "").strip():
                    missing.append(f"thoughtloom.{name}.{member}")
    return missing
