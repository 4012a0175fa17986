"""Which commit of thoughtloom is running, when it runs from a git checkout of thoughtloom itself.

Stored runs and bench protocols both record it; one lookup keeps their answers the same.
"""

from __future__ import annotations

import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Checkout:
    """The commit the package runs from and whether the package's files differ from it."""

    commit: str
    dirty: bool


def _is_thoughtloom_project(pyproject: Path) -> bool:
    """True when this pyproject.toml is thoughtloom's own (not a user's project vendoring the package)."""
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name") == "thoughtloom"
    except (OSError, ValueError):
        return False


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5,
                          check=True).stdout.strip()


def running_checkout() -> Checkout | None:
    """The checkout this package runs from, or None when it is installed or vendored elsewhere.

    The commit is thoughtloom's own only when the repository's top level holds this package and
    thoughtloom's pyproject.toml: installed into a virtual environment inside a user's own
    repository, git would answer with the user's commit.
    """
    root = Path(__file__).resolve().parents[1]
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if not top or Path(top).resolve() != root or not _is_thoughtloom_project(root / "pyproject.toml"):
            return None
        commit = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--", "thoughtloom")
    except (OSError, subprocess.SubprocessError):
        return None
    return Checkout(commit, bool(dirty)) if commit else None
