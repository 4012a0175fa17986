"""How the embedded model's thread count holds up beside a CPU-bound neighbour (BENCHMARKS.md §12).

Usage:
    .venv/bin/python benchmarks/threads.py [--reps 2] [--settings old,1,2,3,4,passive,start,auto]
        [--workloads game24,prime] [--out threads.json]

Each run is a fresh `loom solve ... --no-store --quiet` process (what a user waits for: start-up,
model load and the search), timed wall-clock, once on an otherwise idle machine and once beside a
neighbour that spins one core (a Python loop counting, started 2 s before the run, stopped after);
the neighbour's count per second during the run, over its count per second alone, is the share
of a core it kept.
Settings:
  old      the default before this script: every core, and libgomp's own spinning at a barrier
           (GOMP_SPINCOUNT=300000)
  N        --threads N, spinning as thoughtloom sets it (GOMP_SPINCOUNT=10000)
  passive  every core, llama.cpp's OpenMP threads sleeping at a barrier at once (GOMP_SPINCOUNT=0)
  start    cores less the one-minute load average when the model loads, never re-read
  auto     the default (thoughtloom.llm.threads): every core when the others are idle; beside busy
           ones, fewer threads for narrow decodes (generation) and more for wide ones (prompts),
           the load re-read every second
Workloads: game24 is the README's main job (`--task game24 "4 5 6 10"`: choosing among legal steps,
prompt reading only); prime is `"Is 91 prime?" --seed 1` on the general task (writing thoughts:
generation-heavy). The script prints a table (median seconds per cell, the busy/idle ratio) with
the load average before each run, and writes every run to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOM = [sys.executable, "-m", "thoughtloom"]
WORKLOADS = {
    "game24": ["solve", "--task", "game24", "4 5 6 10"],
    "prime": ["solve", "Is 91 prime?", "--seed", "1"],
}
# The start-only policy: cores less the one-minute load average when the model loads, never re-read.
START_ONLY = (
    "import os, sys, thoughtloom.llm.local as local\n"
    "from thoughtloom.llm.threads import FixedThreads, threads_for, usable_cpus\n"
    "local.thread_policy = lambda n: FixedThreads(n if n is not None else threads_for(usable_cpus(), os.getloadavg()[0]))\n"
    "from thoughtloom.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def command(setting: str, workload: str) -> tuple[list[str], dict[str, str]]:
    """The process to run for one setting and workload, and its environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("THOUGHTLOOM_THREADS", "OMP_WAIT_POLICY",
                                                             "GOMP_SPINCOUNT")}
    args = [*WORKLOADS[workload], "--no-store", "--quiet"]
    cores = str(os.cpu_count() or 1)
    if setting == "old":
        env["GOMP_SPINCOUNT"] = "300000"
        return [*LOOM, *args, "--threads", cores], env
    if setting == "passive":
        env["GOMP_SPINCOUNT"] = "0"
        return [*LOOM, *args, "--threads", cores], env
    if setting == "start":
        return [sys.executable, "-c", START_ONLY, *args], env
    return [*LOOM, *args, "--threads", setting], env


# Counts as fast as it can and, on SIGTERM, prints how far it got.
NEIGHBOUR = (
    "import signal, sys, time\n"
    "n = 0\n"
    "def report(*_):\n"
    "    print(n, time.monotonic(), flush=True); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, report)\n"
    "print(time.monotonic(), flush=True)\n"
    "while True: n += 1\n"
)


def neighbour_rate(seconds: float) -> float:
    """The neighbour's count per second when it runs alone for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    started = float(proc.stdout.readline())
    time.sleep(seconds)
    proc.terminate()
    count, ended = proc.stdout.readline().split()
    proc.wait()
    return int(count) / (float(ended) - started)


def run_once(setting: str, workload: str, busy: bool, alone_rate: float) -> dict[str, object]:
    """One timed run, beside a counting neighbour when `busy`."""
    neighbour = None
    if busy:
        neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.PIPE, text=True)
        assert neighbour.stdout is not None
        neighbour.stdout.readline()
        time.sleep(2.0)
    load = os.getloadavg()[0]
    cmd, env = command(setting, workload)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    kept = None
    if neighbour is not None:
        neighbour.terminate()
        assert neighbour.stdout is not None
        count, _ = neighbour.stdout.readline().split()
        neighbour.wait()
        # Its count includes the 2 s alone before the run: take them out at the alone rate.
        kept = round((int(count) - 2.0 * alone_rate) / seconds / alone_rate, 2)
    answer = next((line for line in done.stdout.splitlines() if line.startswith("answer")), "")
    return {"setting": setting, "workload": workload, "busy": busy, "seconds": round(seconds, 2),
            "exit": done.returncode, "load_before": round(load, 2), "answer": answer, "neighbour_kept": kept,
            "error": done.stderr.strip().splitlines()[-1] if done.returncode else ""}


def main() -> int:
    """Run every (workload, setting, idle/busy) cell `--reps` times and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--settings", default="old,1,2,3,4,passive,start,auto")
    parser.add_argument("--workloads", default="game24,prime")
    parser.add_argument("--out", default="threads.json")
    args = parser.parse_args()
    settings = args.settings.split(",")
    workloads = args.workloads.split(",")
    runs: list[dict[str, object]] = []
    alone = neighbour_rate(5.0)
    for rep in range(args.reps):
        for workload in workloads:
            for setting in settings:
                for busy in (False, True):
                    run = run_once(setting, workload, busy, alone)
                    runs.append(run)
                    print(f"rep {rep + 1} {workload:<7} {setting:<8} {'busy' if busy else 'idle'}  "
                          f"{run['seconds']:>7.1f}s  load {run['load_before']}  neighbour kept "
                          f"{run['neighbour_kept']}  exit {run['exit']} {run['error']}", file=sys.stderr, flush=True)
                    time.sleep(5.0)  # let the neighbour's load leave the load average a little
    Path(args.out).write_text(json.dumps(runs, indent=1))
    print(f"{'workload':<8} {'setting':<8} {'idle s':>7} {'busy s':>7} {'busy/idle':>9} {'neighbour kept':>15}")
    for workload in workloads:
        for setting in settings:
            def median(busy: bool, key: str = "seconds") -> float:
                return statistics.median(float(r[key]) for r in runs  # type: ignore[arg-type]
                                         if r["workload"] == workload and r["setting"] == setting and r["busy"] == busy)
            idle, busy = median(False), median(True)
            print(f"{workload:<8} {setting:<8} {idle:>7.1f} {busy:>7.1f} {busy / idle:>9.2f} "
                  f"{median(True, 'neighbour_kept'):>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
