"""Profile thoughtloom's row of the side-by-side harness: where a node's time goes.

Usage: .venv/bin/python benchmarks/anchor_profile.py [ANCHORS_DIR] [SEARCHES]
ANCHORS_DIR is the shared harness (default ../shared/bench/anchors, whose bench_loom.py drives
thoughtloom through its public API with a network-style backend); SEARCHES depth-3 searches
(default 300) run under cProfile after a warm-up. Prints the asyncio tasks and event-loop
iterations per search, the Python function calls and profiled µs per node, and the entries
with the most self time. Writes nothing.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys

NODES_PER_SEARCH = 55  # depth 3: 5 + 25 + 25 scored children


def main() -> None:
    """Run the profile and print its summary."""
    anchors = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "anchors")
    searches = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    sys.path.insert(0, os.path.abspath(anchors))
    import bench_loom  # the shared harness's thoughtloom driver

    for _ in range(20):
        bench_loom.run_search(3)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(searches):
        bench_loom.run_search(3)
    profile.disable()
    stats = pstats.Stats(profile)
    nodes = searches * NODES_PER_SEARCH

    def calls_of(name: str) -> int:
        return sum(nc for (_, _, fn), (_, nc, _, _, _) in stats.stats.items() if fn == name)  # type: ignore[attr-defined]

    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}; {searches} depth-3 searches")
    print(f"asyncio tasks created per search: {calls_of('create_task') / searches:.1f}")
    print(f"event-loop iterations per search: {calls_of('_run_once') / searches:.1f}")
    print(f"Python function calls per node:   {stats.total_calls / nodes:.0f}")  # type: ignore[attr-defined]
    print(f"us per node under the profiler:   {stats.total_tt / nodes * 1e6:.0f}")  # type: ignore[attr-defined]
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(10)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[-2000:])


if __name__ == "__main__":
    main()
