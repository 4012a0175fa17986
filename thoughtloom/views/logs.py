"""The library's log records on a terminal: levelled, one line each, model and program text escaped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .terminal import terminal_text

#: --log-level's choices, quietest last.
LEVELS = ("debug", "info", "warning", "error")


class TerminalFormatter(logging.Formatter):
    """`loom: LEVEL logger: message`, escaped; a traceback (debug) keeps its line breaks, escaped too."""

    def format(self, record: logging.LogRecord) -> str:
        """One escaped line, then the escaped traceback if the record carries one."""
        message = terminal_text(f"loom: {record.levelname.lower()} {record.name}: {record.getMessage()}")
        if record.exc_info:
            message += "\n" + terminal_text(self.formatException(record.exc_info), newlines=True)
        return message


def log_level(verbose: int, level: str | None) -> int:
    """The logging level of `-v` given `verbose` times (info, then debug) or of `--log-level` (it wins)."""
    if level is not None:
        return logging.getLevelNamesMapping()[level.upper()]
    return logging.DEBUG if verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING


@contextmanager
def shown_logs(stream: TextIO, level: int) -> Iterator[None]:
    """While inside, thoughtloom's records at `level` and above go to `stream` (escaped); then as before."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TerminalFormatter())
    logger = logging.getLogger("thoughtloom")
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
