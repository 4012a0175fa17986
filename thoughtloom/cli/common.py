"""What every `loom` command shares: one-line usage errors, argparse types that say what they want, the run store."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.store import BlockStore


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


#: The largest whole number a stored run can hold (DAG-CBOR encodes 64-bit integers): options past it
#: would fail to store only after the model calls were made.
MAX_STORED_INT = 2**63 - 1
#: Bounds on counts that multiply work (requests, nodes, levels); far above any useful setting.
MAX_FANOUT = 1_000
#: --mermaid-full, on every command that writes --mermaid.
MERMAID_FULL_HELP = ("--mermaid draws every node (by default a big graph is capped to the best path and the "
                     "frontier, to stay within Mermaid's 50,000-character and 500-edge limits)")


def number(name: str, cast: Callable[[str], Any], check: Callable[[Any], bool], requirement: str):
    """An argparse type: parse with `cast`, then require `check` (said as `requirement`).

    Floats must be finite: no option means anything with nan or inf (and a stored run cannot hold them).
    """
    kind = "a whole number" if cast is int else "a finite number"

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {kind}; got {text!r}") from None
        if cast is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be {kind}; got {text}")
        if not check(value):
            raise argparse.ArgumentTypeError(f"{name} must be {requirement}; got {text}")
        return value

    return parse


def positive_int(name: str, most: int = MAX_STORED_INT):
    """A whole number from 1 to `most`."""
    return number(name, int, lambda v: 1 <= v <= most, f"at least 1 and at most {most:,}")


def count(name: str, most: int = MAX_STORED_INT):
    """A whole number from 0 to `most`."""
    return number(name, int, lambda v: 0 <= v <= most, f"at least 0 and at most {most:,}")


def positive_float(name: str, most: float = 1e12):
    """A finite number above 0 and at most `most`."""
    return number(name, float, lambda v: 0 < v <= most, f"positive, at most {most:g}")


def nonnegative_float(name: str, most: float = 1e12):
    """A finite number from 0 to `most`."""
    return number(name, float, lambda v: 0 <= v <= most, f"at least 0, at most {most:g}")


def add_price_options(s: Any) -> None:
    """--price-in and --price-out, shared by loom solve (and the commands built on it) and loom bench."""
    s.add_argument("--price-in", type=nonnegative_float("--price-in"), metavar="USD",
                   help="the model's price per million input tokens (with --price-out); needed for a cost and "
                   "for --budget-usd when the model is not on the known price list")
    s.add_argument("--price-out", type=nonnegative_float("--price-out"), metavar="USD",
                   help="the model's price per million output tokens (with --price-in)")


def add_bridge_hops_option(group: Any) -> None:
    """--bridge-hops N: one flag, one meaning for loom agent and loom research (tasks/hops)."""
    from ..tasks.hops import MAX_BRIDGE_HOPS

    group.add_argument("--bridge-hops", type=count("--bridge-hops", MAX_BRIDGE_HOPS), metavar="N",
                       help="follow-up document searches for the entity a bridge question's first passages name "
                       "(default 1; 0: one search)")


def threads_arg(text: str) -> int | str:
    """--threads: a whole number of threads, or auto (follow the load)."""
    from ..llm.errors import ModelConfigError
    from ..llm.threads import AUTO, parse_threads

    try:
        threads = parse_threads(text)
    except ModelConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return AUTO if threads is None else threads


def add_threads_option(s: Any) -> None:
    """--threads, on every command that can run an embedded model."""
    s.add_argument("--threads", type=threads_arg, metavar="N|auto",
                   help="CPU threads the embedded model computes with (default: $THOUGHTLOOM_THREADS, else auto: "
                        "every core on an idle machine; beside busy processes, fewer threads for generating and "
                        "more for reading prompts, the load re-read every second)")


def add_stream_option(s: Any) -> None:
    """--no-stream, on every command that runs a model for a search."""
    s.add_argument("--no-stream", action="store_true",
                   help="send each request whole instead of streaming the reply (for servers that cannot stream; "
                        "the progress line and --events then show no text as it is written; env THOUGHTLOOM_STREAM=0)")


def unit_float(name: str):
    """A number from 0 to 1."""
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
