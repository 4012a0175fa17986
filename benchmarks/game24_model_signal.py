"""Does the embedded model know anything about Game of 24 states? Its two signals, against exact truth.

1. Proposals: for each puzzle, the model scores every legal first step (score_choices over
   `legal_steps`); how often are its top-1 and top-5 steps still solvable, against the share of
   all legal steps that are (what a random choice gets)?
2. Values: for states one or two steps into dev puzzles, the expected verdict under the model's
   distribution over sure/likely/impossible (the game24 value prompt); how well does it separate
   solvable from unsolvable states (ROC AUC; 0.5 is chance)?

Solvability is decided exactly (fractions, every order of operations).

    python benchmarks/game24_model_signal.py --data-dir ../shared/data [--model local:gemma-3-270m] [--puzzles 40] [--states 240]

Prints one JSON object; BENCHMARKS.md quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import itertools
import json
import os
import random
import time
from fractions import Fraction
from pathlib import Path

from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.types import GenerateRequest, parse_choice_text
from thoughtloom.grounding.arith import OPS
from thoughtloom.tasks.game24 import VERDICTS, Game24, legal_steps

TASK = Game24()


def solvable(numbers: list[Fraction]) -> bool:
    """Whether the numbers can make exactly 24."""
    if len(numbers) == 1:
        return numbers[0] == 24
    for i, j in itertools.permutations(range(len(numbers)), 2):
        rest = [x for k, x in enumerate(numbers) if k not in (i, j)]
        for op in "+-*/":
            if op == "/" and numbers[j] == 0:
                continue
            if solvable([*rest, OPS[op](numbers[i], numbers[j])]):
                return True
    return False


def puzzles(data_dir: Path, first: int, count: int) -> list[tuple[Fraction, ...]]:
    """Dev puzzles from rank `first` on."""
    with (data_dir / "game24" / "24_dev.csv").open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["Rank"]) >= first][:count]
    return [tuple(Fraction(int(x)) for x in r["Puzzles"].split()) for r in rows]


def after(numbers: tuple[Fraction, ...], step: str) -> tuple[Fraction, ...]:
    """The numbers left after one legal step."""
    return TASK.left(numbers, [TASK.validate(numbers, (), step).thought])


def random_states(source: list[tuple[Fraction, ...]], count: int, seed: int) -> list[tuple[Fraction, ...]]:
    """States one or two random legal steps into the puzzles."""
    rng = random.Random(seed)
    out = []
    for numbers in itertools.cycle(source):
        state = numbers
        for _ in range(rng.choice((1, 2))):
            state = after(state, rng.choice(legal_steps(state)))
        out.append(state)
        if len(out) == count:
            return out
    return out


def auc(scores: list[float], labels: list[bool]) -> float:
    """ROC AUC: the chance that a solvable state scores above an unsolvable one (ties count half)."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / max(1, len(pos) * len(neg))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--model", default="local")
    ap.add_argument("--first-rank", type=int, default=801)
    ap.add_argument("--puzzles", type=int, default=40)
    ap.add_argument("--states", type=int, default=240)
    args = ap.parse_args()
    backend = make_backend(args.model)
    source = puzzles(args.data_dir, args.first_rank, args.puzzles)

    t0 = time.perf_counter()
    top1 = top5 = base = 0.0
    for numbers in source:
        steps = legal_steps(numbers)
        query = TASK.propose(numbers, (), 5)
        got = await backend.generate(GenerateRequest(query.prompt, choices=steps, score_choices=True, max_tokens=1))
        odds = parse_choice_text(got.texts[0], steps) or {}
        ranked = sorted(steps, key=lambda s: -odds.get(s, 0.0))
        good = {s: solvable(list(after(numbers, s))) for s in steps}
        top1 += good[ranked[0]]
        top5 += sum(good[s] for s in ranked[:5]) / 5
        base += sum(good.values()) / len(steps)
    propose_s = (time.perf_counter() - t0) / len(source)

    states = random_states(source, args.states, seed=0)
    labels = [solvable(list(s)) for s in states]
    t0 = time.perf_counter()
    scores = []
    for state in states:
        query = TASK.value(state, ())
        got = await backend.generate(GenerateRequest(query.prompt, choices=VERDICTS, score_choices=True, max_tokens=1))
        odds = parse_choice_text(got.texts[0], VERDICTS) or {}
        scores.append(sum(p * TASK.parse_value(state, (), [w]) for w, p in odds.items()))
    value_s = (time.perf_counter() - t0) / len(states)
    n = len(source)
    print(json.dumps({
        "model": backend.name, "puzzles": n, "first_rank": args.first_rank,
        "proposals": {"top1_solvable": round(top1 / n, 3), "top5_solvable": round(top5 / n, 3),
                      "random_step_solvable": round(base / n, 3), "s_per_puzzle": round(propose_s, 2)},
        "values": {"states": len(states), "solvable": sum(labels), "auc": round(auc(scores, labels), 3),
                   "s_per_state": round(value_s, 2)},
        "load_1min": round(os.getloadavg()[0], 2),
    }, indent=2))
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
