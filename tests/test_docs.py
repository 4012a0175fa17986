"""The documentation stays true to the code: links resolve, commands parse, Python examples import what exists.

The README's examples are run by tests/test_readme.py; the pages under docs/ are reference, and
their examples are checked here without a model: every `loom` command line parses with today's
CLI, and every Python block compiles and imports only names thoughtloom has.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from docs_examples import Block, blocks

from thoughtloom.cli.main import build_parser
from thoughtloom.eval.lanes import ALL_LANES

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "BENCHMARKS.md", ROOT / "examples" / "README.md",
                *(ROOT / "docs").glob("*.md")])
DOC_BLOCKS = [b for page in (ROOT / "docs").glob("*.md") for b in blocks(page)]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub (and MkDocs' default toc) write it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (fenced blocks left out)."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links(page: Path) -> list[str]:
    """The relative links of a page, outside fenced blocks."""
    out: list[str] = []
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out += [m.group(1) for m in _LINK.finditer(line) if "://" not in m.group(1)
                    and not m.group(1).startswith("mailto:")]
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_a_page_reaches_a_file_and_its_heading(page: Path) -> None:
    for link in links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.relative_to(ROOT)}: link {link} names no file"
        assert str(path).startswith(str(ROOT)), f"{page.relative_to(ROOT)}: link {link} leaves the repository"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.relative_to(ROOT)}: link {link} names no heading of {target or 'it'}"


@pytest.mark.parametrize("block", [b for b in DOC_BLOCKS if b.info in ("bash", "console")],
                         ids=lambda b: f"{b.path.parent.name}/{b.where}")
def test_every_loom_command_in_the_docs_parses(block: Block) -> None:
    parser = build_parser()
    lines = [c.line for c in block.commands()] if block.info == "console" else block.text.splitlines()
    for line in lines:
        for part in re.split(r"\s(?:&&|\|\||;)\s", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue  # not a command line (a table in a plain block)
            if words[:1] == ["loom"] and len(words) > 1:
                check_command(parser, words, f"{block.path.name}:{block.line}")


def check_command(parser: argparse.ArgumentParser, words: list[str], where: str) -> None:
    """A loom command line parses with today's CLI, and the bench lanes it names exist."""
    command = shlex.join(words)
    try:
        args = parser.parse_args(words[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{command}` does not parse (exit {exc.code})")
    lanes = [n.strip() for n in (getattr(args, "lanes", None) or "").split(",") if n.strip()]
    unknown = set(lanes) - set(ALL_LANES) if args.command == "bench" else set()
    assert not unknown, f"{where}: `{command}` names no lane {sorted(unknown)}"


@pytest.mark.parametrize("block", [b for b in DOC_BLOCKS if b.info == "python"],
                         ids=lambda b: f"{b.path.parent.name}/{b.where}")
def test_every_python_example_in_the_docs_compiles_and_imports_what_exists(block: Block) -> None:
    tree = ast.parse(block.text, filename=block.where)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "thoughtloom":
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                    f"{block.where}: {node.module} has no {alias.name}")


_INLINE = re.compile(r"`(loom [^`]+)`")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_loom_command_written_inline_parses(page: Path) -> None:
    parser = build_parser()
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        for command in [] if fenced else _INLINE.findall(line):
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            # A command with options, not a mention of one (`loom show`, `loom bench --store`) or a
            # synopsis (`loom view RUN [--out FILE]`).
            if (not any(w.startswith("--") for w in words) or words[-1].startswith("--") or "--help" in words
                    or any("[" in w or "..." in w for w in words)):
                continue
            check_command(parser, words, f"{page.name}:{number}")
