"""Concurrency: does the engine overlap model calls? Wall-clock of a bfs search on a slow fake model.

Usage: .venv/bin/python benchmarks/concurrency.py
bfs with breadth 5, beam 5, depth 3 and one value sample: each kept thought gets one propose call
returning 5 children and each child one value call, so 1 + 5 + 5 expansions make 55 thoughts with
66 calls. Every call takes 200 ms. A loop that awaits one call at a time needs the sum of the
latencies (66 x 0.2 s = 13.2 s); the critical path is 3 levels x (propose, then value) x 0.2 s
= 1.2 s. Prints a table; writes nothing.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _synthetic import SyntheticTask, synthetic_backend  # noqa: E402

from thoughtloom.api import make_gateway  # noqa: E402
from thoughtloom.llm.budget import BudgetLimits  # noqa: E402
from thoughtloom.search.config import SearchConfig  # noqa: E402
from thoughtloom.search.engine import search  # noqa: E402

LATENCY_S = 0.2
BREADTH, BEAM, DEPTH = 5, 5, 3
EXPECTED_NODES, EXPECTED_CALLS = 55, 66
CRITICAL_PATH_S = DEPTH * 2 * LATENCY_S  # per level: a propose call, then the value calls
REPEATS = 5
TARGET_RATIO = 1.2


async def run_once() -> tuple[float, int, int, int]:
    config = SearchConfig(
        strategy="bfs", breadth=BREADTH, beam=BEAM, max_depth=DEPTH, value_samples=1, concurrency=64,
    )
    backend = synthetic_backend(BREADTH, latency_s=LATENCY_S)
    gateway = make_gateway(backend, BudgetLimits(), concurrency=config.concurrency)
    t0 = time.perf_counter()
    result = await search(SyntheticTask(), "synthetic problem", gateway, config)
    wall = time.perf_counter() - t0
    thoughts = sum(1 for n in result.graph if n.kind.value not in ("input", "solution"))
    return wall, thoughts, len(backend.calls), backend.peak_in_flight


def main() -> None:
    runs = [asyncio.run(run_once()) for _ in range(REPEATS)]
    walls = [r[0] for r in runs]
    _, thoughts, calls, peak = runs[0]
    assert all(r[1:3] == (thoughts, calls) for r in runs)
    if (thoughts, calls) != (EXPECTED_NODES, EXPECTED_CALLS):
        sys.exit(f"expected {EXPECTED_NODES} thoughts / {EXPECTED_CALLS} calls, got {thoughts} / {calls}")
    wall = statistics.median(walls)
    serial = calls * LATENCY_S
    ratio = wall / CRITICAL_PATH_S
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; bfs breadth {BREADTH} beam {BEAM} depth {DEPTH}, "
          f"value_samples 1, concurrency 64, {LATENCY_S * 1000:.0f} ms per call, median of {REPEATS}")
    print(f"{'thoughts':>8} {'calls':>6} {'peak in flight':>14} {'wall s':>7} {'sum of latencies s':>18} "
          f"{'critical path s':>15} {'wall/critical':>13} {'target':>7}")
    print(f"{thoughts:>8} {calls:>6} {peak:>14} {wall:>7.3f} {serial:>18.1f} {CRITICAL_PATH_S:>15.1f} "
          f"{ratio:>13.3f} {'ok' if ratio <= TARGET_RATIO else 'MISS':>7}")
    print(f"runs (s): {' '.join(f'{w:.3f}' for w in walls)}; speed-up over one call at a time: {serial / wall:.1f}x")


if __name__ == "__main__":
    main()
