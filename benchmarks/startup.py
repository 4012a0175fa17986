"""Startup: wall time of `import thoughtloom` and `loom --help` in fresh processes.

Usage: .venv/bin/python benchmarks/startup.py
Each command runs 5 times in a new interpreter; the median is reported, with a bare interpreter
(`python -c pass`) for reference and `-X importtime`'s own figure for the import. Prints a table;
writes nothing.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5
TARGET_S = 0.5
PY = sys.executable
LOOM = str(Path(PY).parent / "loom")


def median_wall(cmd: list[str]) -> tuple[float, list[float]]:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def importtime_us() -> int:
    """Cumulative microseconds -X importtime reports for the thoughtloom package itself."""
    out = subprocess.run([PY, "-X", "importtime", "-c", "import thoughtloom"], check=True,
                         capture_output=True, text=True).stderr
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "thoughtloom":
            return int(parts[1])
    raise RuntimeError("thoughtloom not in -X importtime output")


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"median of {RUNS} fresh processes")
    print(f"{'command':<34} {'median s':>8} {'target':>7}   runs")
    rows = [
        ("python -c pass (reference)", [PY, "-c", "pass"], False),
        ("python -c 'import thoughtloom'", [PY, "-c", "import thoughtloom"], True),
        ("loom --help", [LOOM, "--help"], True),
    ]
    for label, cmd, targeted in rows:
        med, times = median_wall(cmd)
        verdict = ("ok" if med < TARGET_S else "MISS") if targeted else "-"
        print(f"{label:<34} {med:>8.3f} {verdict:>7}   {' '.join(f'{t:.3f}' for t in times)}")
    print(f"-X importtime, thoughtloom package cumulative: {importtime_us() / 1000:.1f} ms")


if __name__ == "__main__":
    main()
