"""The model against the LM-free control on Game of 24, from `loom bench` run directories.

Run the lanes first (the same 100 dev puzzles, the same 20,000-token budget per puzzle):

    IDS=$(seq -s, 801 900)
    loom bench --data-dir ../shared/data --tasks game24 --lanes tot,random --ids $IDS --budget-tokens 20000 --out runs/main
    loom bench --data-dir ../shared/data --tasks game24 --lanes random --ids $IDS --budget-tokens 20000 --seed 1000 --out runs/random1000
    loom bench --data-dir ../shared/data --tasks game24 --lanes random --ids $IDS --budget-tokens 20000 --seed 2000 --out runs/random2000
    python benchmarks/game24_vs_random.py runs/main runs/random1000 runs/random2000

Prints, per lane, solved / runs with a 95% Wilson interval, mean tokens, calls and seconds per
puzzle, and the paired difference (model minus the control's mean over its seeds, puzzle by
puzzle) with a 95% bootstrap interval over puzzles.
"""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from pathlib import Path

from thoughtloom.eval.stats import wilson


def main(dirs: list[str]) -> None:
    rows = [json.loads(line) for d in dirs for line in (Path(d) / "results.jsonl").open() if line.strip()]
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_lane[row["lane"]].append(row)
    out: dict[str, object] = {}
    for lane, runs in sorted(by_lane.items()):
        solved = sum(bool(r["solved"]) for r in runs)
        low, high = wilson(solved, len(runs))
        out[lane] = {
            "solved": solved, "runs": len(runs), "rate": round(solved / len(runs), 3),
            "ci95": [round(low, 3), round(high, 3)],
            "mean_tokens": round(sum(r["tokens"] for r in runs) / len(runs)),
            "max_tokens": max(r["tokens"] for r in runs),
            "mean_calls": round(sum(r["calls"] for r in runs) / len(runs), 1),
            "mean_s": round(sum(r["wall_s"] for r in runs) / len(runs), 2),
            "stops": dict(sorted({s: sum(r["stop_reason"] == s for r in runs)
                                  for s in {r["stop_reason"] for r in runs}}.items())),
        }
    if "tot" in by_lane and "random" in by_lane:
        model = {r["problem_id"]: float(bool(r["solved"])) for r in by_lane["tot"]}
        control: dict[str, list[float]] = defaultdict(list)
        for r in by_lane["random"]:
            control[r["problem_id"]].append(float(bool(r["solved"])))
        ids = sorted(set(model) & set(control))
        diffs = [model[i] - sum(control[i]) / len(control[i]) for i in ids]
        rng = random.Random(0)
        boots = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(10_000))
        out["tot_minus_random"] = {"puzzles": len(ids), "mean": round(sum(diffs) / len(diffs), 3),
                                   "ci95": [round(boots[250], 3), round(boots[9750], 3)]}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
