"""The library's log records on a terminal: levelled, one line each, model and program text escaped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.control import Control, ControlType
from rich.text import Text

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


class TerminalHandler(logging.Handler):
    """Writes formatted records to a stream; on a terminal it first erases a progress line drawn there."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.setFormatter(TerminalFormatter())
        self.console = Console(file=stream, force_terminal=stream.isatty(), highlight=False, markup=False,
                               emoji=False)

    def emit(self, record: logging.LogRecord) -> None:
        """One record as a line of its own (the progress line is redrawn at its next update)."""
        try:
            text = self.format(record)
            if self.console.is_terminal:
                self.console.control(Control.move_to_column(0), Control((ControlType.ERASE_IN_LINE, 2)))
            self.console.print(Text(text), soft_wrap=True)
            self.console.file.flush()
        except Exception:  # noqa: BLE001 - logging's rule: a failing handler reports itself, never raises
            self.handleError(record)


@contextmanager
def shown_logs(stream: TextIO, level: int) -> Iterator[None]:
    """While inside, thoughtloom's records at `level` and above go to `stream` (escaped); then as before."""
    handler = TerminalHandler(stream)
    logger = logging.getLogger("thoughtloom")
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
