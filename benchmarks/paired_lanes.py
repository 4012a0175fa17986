"""Every lane of `loom bench` runs against one of them, problem by problem, from their results.jsonl.

    loom bench --tasks gsm8k --lanes cot,cot_sc,pot,tot --limit 100 --budget-tokens 4000 --out runs/gsm8k
    python benchmarks/paired_lanes.py runs/gsm8k tot
    python benchmarks/paired_lanes.py runs/gsm8k runs/gsm8k-new "tot (gsm8k-new)"

Several run directories (the same problems and seeds) are read together; a lane that two of them
ran is named with its directory, "tot (gsm8k-new)".

Prints, per lane, solved / problems with a 95% Wilson interval, mean tokens, calls and seconds per
problem; then for each other lane the paired difference (the reference lane minus it, in points,
on the problems both ran) with a 95% bootstrap interval over problems (10,000 resamples, seed 0);
then each lane's solved fraction against the tokens it had spent when it solved (a problem counts
at T tokens when its run solved it within T): the budget a lane needs for a given success rate.
"""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from pathlib import Path

from thoughtloom.eval.stats import wilson

RESAMPLES = 10_000


def paired_interval(diffs: list[int], rng: random.Random) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the mean difference over bootstrap resamples of the problems."""
    n = len(diffs)
    means = sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(RESAMPLES))
    return means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def read_runs(directories: list[str]) -> dict[str, list[dict]]:
    """Each lane's rows over the run directories; a lane found in two of them is named with its directory."""
    per_dir = {d: [json.loads(line) for line in (Path(d) / "results.jsonl").open() if line.strip()] for d in directories}
    seen: dict[str, int] = defaultdict(int)
    for rows in per_dir.values():
        for lane in {r["lane"] for r in rows}:
            seen[lane] += 1
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for directory, rows in per_dir.items():
        for row in rows:
            name = row["lane"] if seen[row["lane"]] == 1 else f"{row['lane']} ({Path(directory).name})"
            by_lane[name].append(row)
    return by_lane


def main(directories: list[str], reference: str) -> None:
    """Print the lanes' table and the reference lane's paired differences."""
    by_lane = read_runs(directories)
    solved = {lane: {r["problem_id"]: bool(r["solved"]) for r in runs} for lane, runs in by_lane.items()}
    width = max(9, *(len(lane) for lane in by_lane))
    print(f"{'lane':<{width}} solved            95% CI        mean tokens  mean calls  mean s")
    for lane, runs in sorted(by_lane.items()):
        n, k = len(runs), sum(bool(r["solved"]) for r in runs)
        low, high = wilson(k, n)
        print(f"{lane:<{width}} {k:>3}/{n:<3} = {k / n:>4.0%}  [{low:>4.0%}, {high:>4.0%}]  "
              f"{sum(r['tokens'] for r in runs) / n:>11,.0f}  {sum(r['calls'] for r in runs) / n:>10.1f}  "
              f"{sum(r['wall_s'] for r in runs) / n:>6.1f}")
    if reference not in solved:
        raise SystemExit(f"no lane {reference!r} in {', '.join(directories)}; lanes: {', '.join(sorted(solved))}")
    rng = random.Random(0)
    for lane in sorted(solved):
        if lane == reference:
            continue
        both = sorted(set(solved[lane]) & set(solved[reference]))
        diffs = [int(solved[reference][p]) - int(solved[lane][p]) for p in both]
        low, high = paired_interval(diffs, rng)
        mean = sum(diffs) / len(diffs)
        print(f"{reference} - {lane}: {mean * 100:+.1f} points [{low * 100:+.1f}, {high * 100:+.1f}] on {len(both)} "
              f"problems ({sum(d > 0 for d in diffs)} only {reference}, {sum(d < 0 for d in diffs)} only {lane})")
    curve(by_lane)


def curve(by_lane: dict[str, list[dict]], steps: int = 8) -> None:
    """Each lane's solved fraction within T tokens, for T up to the largest run's tokens."""
    top = max(r["tokens"] for runs in by_lane.values() for r in runs)
    marks = [round(top * (i + 1) / steps, -2) for i in range(steps)]
    print("solved within T tokens: " + "  ".join(f"{m:>7,.0f}" for m in marks))
    for lane, runs in sorted(by_lane.items()):
        fractions = [sum(bool(r["solved"]) and r["tokens"] <= m for r in runs) / len(runs) for m in marks]
        print(f"{lane:<23}" + "  ".join(f"{f:>7.0%}" for f in fractions))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python benchmarks/paired_lanes.py BENCH_DIR [BENCH_DIR ...] REFERENCE_LANE")
    main(sys.argv[1:-1], sys.argv[-1])
