"""The documentation site's generated pages (scripts/mkdocs_hooks.py): they follow the code, so they cannot drift.

scripts/test.sh builds the whole site with `mkdocs build --strict`; these tests pin what the hooks put in it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from thoughtloom.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "loom") -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix} {name}"] = sub
                found.update(_subcommands(sub, f"{prefix} {name}"))
    return found


def test_the_cli_reference_has_a_section_for_every_loom_command() -> None:
    page = _hooks().cli_reference()
    commands = _subcommands(build_parser())
    assert len(commands) >= 16
    for name in commands:
        assert f"## `{name}`\n" in page, f"the CLI reference has no section for `{name}`"


def test_the_cli_reference_lists_every_option_of_every_command() -> None:
    page = _hooks().cli_reference()
    sections = {s.split("`")[1]: s for s in page.split("\n## ")}
    for name, parser in _subcommands(build_parser()).items():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                assert f"`{flag}" in sections[name] or f", {flag}" in sections[name], (
                    f"the CLI reference's `{name}` does not list {flag}")


def test_the_api_reference_documents_every_exported_name() -> None:
    import thoughtloom

    page = _hooks().api_reference() + "\n"
    for name in thoughtloom.__all__:
        if name != "__version__":
            assert f".{name}\n" in page or f"## `{name}`\n" in page, (
                f"the API reference has no block for thoughtloom.{name}")


def test_a_function_made_by_a_wrapper_is_documented_from_the_object_itself() -> None:
    import thoughtloom

    page = _hooks().api_reference()
    assert "## `solve`\n" in page and "::: thoughtloom.api.solve" not in page
    assert thoughtloom.solve.__doc__ in page and "    problem: str,\n    *,\n" in page.split("## `solve`")[1]


def test_every_exported_name_has_a_docstring() -> None:
    assert _hooks().missing_docstrings() == []


def test_a_link_to_a_root_page_is_rewritten_to_the_site_page_that_shows_it() -> None:
    hooks = _hooks()
    text = "See [§15](../BENCHMARKS.md#15-game-of-24) and [the map](../ARCHITECTURE.md)."
    assert hooks.rewrite_links(text, "docs/search.md", "search.md") == (
        "See [§15](benchmarks.md#15-game-of-24) and [the map](architecture.md).")


def test_a_link_in_an_included_root_page_is_rewritten_relative_to_the_page_that_includes_it() -> None:
    hooks = _hooks()
    text = "[docs/search.md](docs/search.md#the-strategies) and [BENCHMARKS.md](BENCHMARKS.md)"
    assert hooks.rewrite_links(text, "README.md", "index.md") == (
        "[docs/search.md](search.md#the-strategies) and [BENCHMARKS.md](benchmarks.md)")


def test_a_link_to_a_source_file_the_site_does_not_show_keeps_only_its_text() -> None:
    hooks = _hooks()
    assert hooks.rewrite_links("[`custom_task.py`](../examples/custom_task.py)", "docs/python.md",
                               "python.md") == "`custom_task.py`"


def test_a_link_that_names_nothing_is_left_for_the_strict_build_to_report() -> None:
    hooks = _hooks()
    text = "[gone](../no-such-file.md)"
    assert hooks.rewrite_links(text, "docs/search.md", "search.md") == text


def test_links_inside_fenced_blocks_are_left_alone() -> None:
    hooks = _hooks()
    text = "```text\n[x](../BENCHMARKS.md)\n```"
    assert hooks.rewrite_links(text, "docs/search.md", "search.md") == text
