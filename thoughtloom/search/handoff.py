"""What a run hands one kind of strategy, and what a strategy hands back, kept by type (ByType).

The agent strategy's ProcessorRegistry and the research strategy's ResearchSetup come from the run;
the research strategy leaves a ResearchResult for the engine's result. Their types live in packages
that build on the search context, so the context cannot name them; kept by type, each reader still
gets its own type back (`ctx.strategy_inputs.get(ProcessorRegistry)` is a ProcessorRegistry or None).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


class ByType:
    """Objects kept by their type and read back typed: at most one of each type."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[object] = ()) -> None:
        self._items: list[object] = []
        for item in items:
            if item is not None:
                self.put(item)

    def get(self, kind: type[T]) -> T | None:
        """The object of this type (or of a subclass of it), or None."""
        return next((item for item in self._items if isinstance(item, kind)), None)

    def put(self, item: object) -> None:
        """Keep an object, in place of one of the same type."""
        self._items = [i for i in self._items if type(i) is not type(item)] + [item]
