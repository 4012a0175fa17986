"""What a trace is: a typed record of what a strategy or the controller did besides the thoughts.

It lives apart from the strategies and the context, which both name it (a strategy's trace, the
controller's report), so neither has to import the other for it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol


class Trace(Protocol):
    """What a strategy or the controller did besides its thoughts: `--json` data and `loom solve` lines."""

    #: The key its data has in a result's `to_dict` ("recursion", "agent", "cove", "control").
    key: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as `--json` prints it and a stored run keeps it."""
        ...

    def lines(self) -> list[str]:
        """The lines `loom solve` prints for it (the caller escapes them for the terminal)."""
        ...
