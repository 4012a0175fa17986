"""Where benchmark data lives when no path is given: $THOUGHTLOOM_DATA, else the cache `loom data fetch` fills.

Below the tasks that read data files by id (GoT, MBPP) and the evaluation harness alike, so both
look in the same one place; nothing is guessed from the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "THOUGHTLOOM_DATA"


def cache_data_dir() -> Path:
    """Where `loom data fetch` writes: $XDG_CACHE_HOME/thoughtloom/data, else ~/.cache/thoughtloom/data."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "thoughtloom" / "data"


def default_data_dir() -> Path:
    """The data directory when none is given: $THOUGHTLOOM_DATA, else the fetch cache."""
    given = os.environ.get(DATA_ENV)
    return Path(given).expanduser() if given else cache_data_dir()
