"""What every `loom` command shares: one-line usage errors, argparse types that say what they want, the run store."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.store import BlockStore


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def number(name: str, cast: Callable[[str], Any], check: Callable[[Any], bool], requirement: str):
    """An argparse type: parse with `cast`, then require `check` (said as `requirement`)."""
    kind = "a whole number" if cast is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {kind}; got {text!r}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"{name} must be {requirement}; got {text}")
        return value

    return parse


def positive_int(name: str):
    return number(name, int, lambda v: v >= 1, "at least 1")


def positive_float(name: str):
    return number(name, float, lambda v: v > 0, "positive")


def unit_float(name: str):
    return number(name, float, lambda v: 0.0 <= v <= 1.0, "between 0 and 1")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def store_path(option: str | None) -> Path:
    """The store file an option names, else the default."""
    from ..store.sqlite import default_store_path

    return Path(option).expanduser() if option else default_store_path()


def open_store(option: str | None, *, must_exist: bool = True) -> tuple[BlockStore, Path]:
    """The SQLite store (StoreError, one line, when it cannot be opened or does not exist)."""
    from ..store.sqlite import SQLiteStore
    from ..store.store import StoreError

    path = store_path(option)
    if must_exist and not path.exists():
        raise StoreError(f"no run store at {path} (runs are stored by 'loom solve'; choose one with --store)")
    return SQLiteStore(path), path
