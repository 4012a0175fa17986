"""The Python API with events: watch a search as it runs, then read its result.

`asolve` (and the blocking `solve`) take `sinks`: callables given every typed event of the search
as it happens (thoughts added, repaired, rejected, scored, pruned, the budget spent, the goal
found, why it stopped). A sink must be quick and must not change the event.

Run it with a scripted stand-in for a model (no download, no key):

    python examples/api_events.py

Give a real model instead with `model="openai:gpt-4o-mini"` or `model="local"`.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from custom_task import ReachTask, scripted_model

import thoughtloom
from thoughtloom.search.events import (
    BudgetSpent,
    Event,
    GoalFound,
    SearchStopped,
    ThoughtRepaired,
)


async def main() -> None:
    """Solve one problem, counting events by type and printing the few worth a line."""
    counts: Counter[str] = Counter()

    def sink(event: Event) -> None:
        counts[event.type] += 1
        if isinstance(event, ThoughtRepaired):
            print(f"  repaired thought {event.node_id}: {event.note}")
        elif isinstance(event, GoalFound):
            print(f"  goal found at thought {event.node_id}")
        elif isinstance(event, SearchStopped):
            print(f"  stopped: {event.reason} after {event.nodes} thoughts")

    result = await thoughtloom.asolve(
        "3 10", task=ReachTask(), model=scripted_model(), controller=False, sinks=[sink],
        budget=thoughtloom.BudgetLimits(tokens=5_000),
    )
    calls = counts[BudgetSpent.type]
    print(f"answer: {result.answer}")
    print(f"events: {dict(sorted(counts.items()))}")
    print(f"model calls: {calls}, tokens: {result.usage.input_tokens + result.usage.output_tokens}")


if __name__ == "__main__":
    asyncio.run(main())
