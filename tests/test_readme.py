"""The README's examples and the tour's (docs/tour.md), run as a new user runs them, with what they print
compared to what the page shows.

Every `console` block's commands run one after another in a fresh folder (`loom` from this
checkout's environment on PATH, the runs stored in a private store, benchmark data fetched from a
local mirror), and each command's stdout must be what the README prints under it (seconds may
differ; a `...` line stands for lines left out). Every `python` block runs as a script, and the
`text` block after it, when there is one, is what it must print. A block the suite cannot run
says why in a `<!-- not run: ... -->` comment, and its `loom` command lines must still parse.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchdata import data_dir, mirror, missing_reason
from docs_examples import Block, blocks, matches
from machine import scaled
from test_docs import check_command

from thoughtloom.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The pages whose examples run as the README's do: the README and the tour it continues in.
RUN_PAGES = (README, ROOT / "docs" / "tour.md")
BLOCKS = [block for page in RUN_PAGES for block in blocks(page)]
RUN = [b for b in BLOCKS if b.info in ("console", "python") and b.not_run is None]
#: What a console command of these pages may name from the checkout (copied into its folder).
SHARED_FILES = ("examples",)
#: The data sets the pages' commands fetch, and where the tests serve them from.
FETCHED = ("game24/24_dev.csv",)


def test_every_block_of_the_readme_runs_or_says_why_not() -> None:
    for block in BLOCKS:
        if block.info in ("text", "mermaid", "toml"):
            continue
        assert block.info in ("console", "python") or block.not_run, (
            f"{block.where}: a `{block.info or 'plain'}` block is neither run (console, python) nor marked "
            "<!-- not run: REASON -->")
        assert block.not_run is None or block.not_run.strip(), f"{block.where}: say why it is not run"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run], ids=lambda b: b.where)
def test_the_loom_commands_of_a_block_not_run_still_parse(block: Block) -> None:
    parser = build_parser()
    for line in _command_lines(block):
        words = shlex.split(line, comments=True)
        if words[:1] == ["loom"]:
            check_command(parser, words, block.where)


def _command_lines(block: Block) -> list[str]:
    """The command lines of a bash or console block (a console block's `$ ` lines)."""
    if block.info == "console":
        return [c.line for c in block.commands()]
    return [line for line in block.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder a user runs the examples in: the checkout's examples beside, data served from a mirror."""
    for name in SHARED_FILES:
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("THOUGHTLOOM_DATA", str(tmp_path / "data"))
    source = data_dir(*FETCHED)
    if all((source / f).exists() for f in FETCHED):
        with mirror(source) as url:
            monkeypatch.setenv("THOUGHTLOOM_DATA_URL", url)
            yield tmp_path
    else:
        monkeypatch.setenv("THOUGHTLOOM_DATA_URL", "http://127.0.0.1:9/")  # fetching fails: the block is skipped
        yield tmp_path


def _needs_data(block: Block) -> bool:
    return "loom data fetch" in block.text or "loom bench" in block.text


@pytest.mark.local_model
@pytest.mark.parametrize("block", [b for b in RUN if b.info == "console"], ids=lambda b: b.where)
def test_a_console_example_prints_what_the_readme_shows(block: Block, user_folder: Path) -> None:
    if _needs_data(block) and not all((data_dir(*FETCHED) / f).exists() for f in FETCHED):
        pytest.skip(missing_reason(*FETCHED))
    for command in block.commands():
        line = _setup_script(command.line)
        done = subprocess.run(["bash", "-c", line], cwd=user_folder, capture_output=True, text=True,
                              timeout=scaled(600), check=False)
        assert done.returncode == 0, f"{block.where}: `{command.line}` exited {done.returncode}:\n{done.stderr}"
        if command.output:
            assert matches(command.output, done.stdout), (
                f"{block.where}: `{command.line}` printed\n{done.stdout}\ninstead of\n" + "\n".join(command.output))


def _setup_script(line: str) -> str:
    """`bash scripts/setup.sh ARGS` is the installer and then `loom ARGS`: the suite runs what it runs after
    installing (this checkout is installed already)."""
    words = shlex.split(line)
    if words[:2] != ["bash", "scripts/setup.sh"]:
        return line
    default = _setup_default()
    return shlex.join(["loom", *(words[2:] or default)])


def _setup_default() -> list[str]:
    """The loom arguments scripts/setup.sh runs when given none (read from the script itself)."""
    for text in (ROOT / "scripts" / "setup.sh").read_text().splitlines():
        if text.strip().startswith("set -- "):
            return shlex.split(text.strip())[2:]
    raise AssertionError("scripts/setup.sh names no default command (`set -- ...`)")


@pytest.mark.local_model
@pytest.mark.parametrize("block", [b for b in RUN if b.info == "python"], ids=lambda b: b.where)
def test_a_python_example_runs_and_prints_what_the_readme_shows(block: Block, user_folder: Path) -> None:
    script = user_folder / "example.py"
    script.write_text(block.text, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=user_folder, capture_output=True, text=True,
                          timeout=scaled(600), check=False)
    assert done.returncode == 0, f"{block.where} failed:\n{done.stderr}"
    if block.prints is not None:
        assert matches(block.prints, done.stdout), f"{block.where} printed\n{done.stdout}\ninstead of\n{block.prints}"
