"""Engine overhead: thoughts expanded and scored per second against a zero-latency fake model.

Usage: .venv/bin/python benchmarks/engine_overhead.py
Builds full 10-ary trees of ~10k (depth 4) and ~100k (depth 5) scored thoughts with bfs and an
unlimited budget, through the gateway the API and the CLI use (make_gateway: budget ledger,
semaphore, response cache, call records). The model is SyntheticBackend (benchmarks/_synthetic.py):
zero latency and nothing but the reply, so the figures are the engine's, not the fake's (the tests'
ScriptedBackend matches rules and counts words, several microseconds more per call). Every
expansion costs one propose call. Thoughts are
valued three ways: `model` one value call per thought; `batched` the same value calls, sent to a
backend that batches (one backend call per group of siblings, each request still reserved,
cached and recorded as its own call); `exact` valued by the task, no value call (the engine's
own cost, as other frameworks measure theirs). nodes/s = scored thoughts / wall seconds of
search(). Also shown: a list.append event sink (the CLI always attaches one), the cost of one
gateway call, and memory per node (tracemalloc).
Prints tables; writes nothing.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
import tracemalloc
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _synthetic import SyntheticBackend, SyntheticTask  # noqa: E402

from thoughtloom.api import make_gateway  # noqa: E402
from thoughtloom.llm.budget import BudgetLimits  # noqa: E402
from thoughtloom.llm.types import GenerateRequest, Prompt  # noqa: E402
from thoughtloom.search.config import SearchConfig  # noqa: E402
from thoughtloom.search.engine import search  # noqa: E402
from thoughtloom.search.result import SearchResult  # noqa: E402

BREADTH = 10
SIZES = {"10k": (4, 3), "100k": (5, 2)}  # label -> (depth, repeats); best run reported
TARGET = 50_000


class ExactSyntheticTask(SyntheticTask):
    """The same tree, but every thought is valued exactly (no value call)."""

    def exact_value(self, problem: str, steps: Sequence[str]) -> float | None:
        return (len(steps[-1]) % 10 + 1) / 10


def _config(depth: int) -> SearchConfig:
    return SearchConfig(strategy="bfs", breadth=BREADTH, beam=10**7, max_depth=depth, value_samples=1,
                        max_nodes=10**7, concurrency=64, one_pass=True)


async def _search(depth: int, mode: str, sinks: list | None) -> tuple[float, SearchResult, int]:
    backend = SyntheticBackend(BREADTH, batch=mode == "batched")
    gateway = make_gateway(backend, BudgetLimits(), concurrency=64)
    task = ExactSyntheticTask() if mode == "exact" else SyntheticTask()
    t0 = time.perf_counter()
    result = await search(task, "synthetic problem", gateway, _config(depth), sinks=sinks)
    wall = time.perf_counter() - t0
    scored = sum(1 for n in result.graph if n.score is not None and n.kind.value != "solution")
    expected = sum(BREADTH**d for d in range(1, depth + 1))
    assert scored == expected and result.termination_reason == "max_depth", (scored, expected)
    assert result.usage.calls == backend.calls
    return wall, result, backend.calls


def speed(depth: int, repeats: int, mode: str, with_sink: bool) -> tuple[float, int, int]:
    best: tuple[float, int, int] | None = None
    for _ in range(repeats):
        gc.collect()
        events: list = []
        wall, result, calls = asyncio.run(_search(depth, mode, [events.append] if with_sink else None))
        scored = len(result.graph) - 2  # minus the input and the solution node
        if best is None or wall < best[0]:
            best = (wall, scored, calls)
        del result, events
    assert best is not None
    return best


def memory(depth: int) -> tuple[float, float]:
    """Peak and retained (result kept alive) traced bytes per graph node, no sink."""
    gc.collect()
    tracemalloc.start()
    holder: list[SearchResult] = []

    async def run() -> None:
        holder.append((await _search(depth, "model", None))[1])

    asyncio.run(run())
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    nodes = len(holder[0].graph)
    holder.clear()
    return peak / nodes, retained / nodes


def call_cost(n: int = 10_000) -> tuple[float, float]:
    """Microseconds per sequential call: through make_gateway's gateway, and the fake alone."""
    requests = [GenerateRequest(Prompt(text=f"value {i}"), max_tokens=4, purpose="evaluate") for i in range(n)]

    async def run() -> tuple[float, float]:
        backend = SyntheticBackend(BREADTH)
        gateway = make_gateway(backend, BudgetLimits(), concurrency=64)
        t0 = time.perf_counter()
        for r in requests:
            await gateway.generate(r)
        t1 = time.perf_counter()
        for r in requests:
            await backend.generate(r)
        t2 = time.perf_counter()
        return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6

    return asyncio.run(run())


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"bfs breadth {BREADTH}, zero-latency SyntheticBackend, best of 3 (10k) / 2 (100k)")
    header = (f"{'graph':>6} {'values':>7} {'sink':>5} {'scored':>7} {'calls':>7} {'wall s':>7} "
              f"{'nodes/s':>8} {'us/node':>8} {'target':>7}")
    print(header)
    print("-" * len(header))
    for mode in ("model", "batched", "exact"):
        for label, (depth, repeats) in SIZES.items():
            for with_sink in (False, True):
                wall, scored, calls = speed(depth, repeats, mode, with_sink)
                rate = scored / wall
                verdict = "ok" if rate >= TARGET else "MISS"
                print(f"{label:>6} {mode:>7} {'yes' if with_sink else 'no':>5} "
                      f"{scored:>7} {calls:>7} {wall:>7.3f} {rate:>8,.0f} {wall / scored * 1e6:>8.1f} {verdict:>7}")
    gw, fake = call_cost()
    print(f"one call, sequential: {gw:.1f} us through the gateway (of which {fake:.1f} us in SyntheticBackend)")
    print()
    print(f"{'graph':>6} {'peak B/node':>12} {'retained B/node':>16}   (tracemalloc, no sink; includes call records)")
    for label, (depth, _) in SIZES.items():
        peak, retained = memory(depth)
        print(f"{label:>6} {peak:>12,.0f} {retained:>16,.0f}")


if __name__ == "__main__":
    main()
