"""Profile thoughtloom's row of the side-by-side harness: where a node's time goes.

Usage:
  .venv/bin/python benchmarks/anchor_profile.py [ANCHORS_DIR] [SEARCHES]
  .venv/bin/python benchmarks/anchor_profile.py --sample SECONDS [ANCHORS_DIR]

ANCHORS_DIR is the shared harness (default ../shared/bench/anchors, whose bench_loom.py drives
thoughtloom through its public API with a network-style backend).

The first form runs SEARCHES depth-3 searches (default 300) under cProfile after a warm-up and
prints the asyncio tasks and event-loop iterations per search, the Python function calls and
profiled µs per node, and the entries with the most self time. cProfile counts calls exactly but
charges each one its own overhead, which inflates small functions.

The second form samples depth-3 searches for SECONDS with py-spy (`pip install py-spy`), which
adds nothing to the calls, and prints each function's share of the time spent in it (self) and
under it (inclusive). Writes nothing but a temporary file.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

NODES_PER_SEARCH = 55  # depth 3: 5 + 25 + 25 scored children
DEFAULT_ANCHORS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "anchors")


def _harness(anchors: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, os.path.abspath(anchors))
    import bench_loom  # the shared harness's thoughtloom driver

    for _ in range(20):
        bench_loom.run_search(3)
    return bench_loom


def profile(anchors: str, searches: int) -> None:
    """cProfile over `searches` depth-3 searches: counts and self times."""
    bench_loom = _harness(anchors)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(searches):
        bench_loom.run_search(3)
    prof.disable()
    stats = pstats.Stats(prof)
    nodes = searches * NODES_PER_SEARCH

    def calls_of(name: str) -> int:
        return sum(nc for (_, _, fn), (_, nc, _, _, _) in stats.stats.items() if fn == name)  # type: ignore[attr-defined]

    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}; {searches} depth-3 searches")
    print(f"asyncio tasks created per search: {calls_of('create_task') / searches:.1f}")
    print(f"event-loop iterations per search: {calls_of('_run_once') / searches:.1f}")
    print(f"Python function calls per node:   {stats.total_calls / nodes:.0f}")  # type: ignore[attr-defined]
    print(f"us per node under the profiler:   {stats.total_tt / nodes * 1e6:.0f}")  # type: ignore[attr-defined]
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(10)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[-2000:])


def loop(anchors: str, seconds: float) -> None:
    """Run depth-3 searches for `seconds` (what py-spy samples)."""
    bench_loom = _harness(anchors)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        bench_loom.run_search(3)


def sample(anchors: str, seconds: float) -> None:
    """py-spy over depth-3 searches for `seconds`: each function's share of the time."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        sys.exit("--sample needs py-spy: pip install py-spy")
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "spy.txt")
        subprocess.run([spy, "record", "-r", "400", "-f", "raw", "-o", raw, "--", sys.executable, __file__,
                        "--loop", str(seconds), anchors], check=True, capture_output=True)
        own, under, total = Counter[str](), Counter[str](), 0
        with open(raw) as f:
            for line in f:
                stack, count = line.rstrip().rsplit(" ", 1)
                if "run_search" not in stack:
                    continue  # the imports before the searches
                n = int(count)
                total += n
                names = [re.sub(r" \((?:.*/)?([^/]*):\d+\)$", r" (\1)", frame) for frame in stack.split(";")]
                own[names[-1]] += n
                for name in set(names):
                    under[name] += n
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}; {total} samples over {seconds:g} s")
    for title, counter in (("self", own), ("inclusive", under)):
        print(f"--- {title}")
        for name, n in counter.most_common(25):
            print(f"{100 * n / total:5.1f}%  {name}")


def main() -> None:
    """Parse the command line and run the chosen profile."""
    args = sys.argv[1:]
    if args[:1] == ["--loop"]:
        loop(args[2] if len(args) > 2 else DEFAULT_ANCHORS, float(args[1]))
    elif args[:1] == ["--sample"]:
        sample(args[2] if len(args) > 2 else DEFAULT_ANCHORS, float(args[1]))
    else:
        profile(args[0] if args else DEFAULT_ANCHORS, int(args[1]) if len(args) > 1 else 300)


if __name__ == "__main__":
    main()
