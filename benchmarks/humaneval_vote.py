"""What the code vote changed on HumanEval: the answer it chose against the first program that passed the visible tests.

    loom bench --tasks humaneval --lanes io,best_of_n,tot --limit 164 --budget-tokens 8000 \\
      --param best_of_n.n=8 --store he164.sqlite --out he164
    python benchmarks/humaneval_vote.py he164 he164.sqlite

Reads each tot run's stored graph, finds the first program (in the order the search made them) whose
grounding passed every visible test, runs it on the hidden tests, and compares it with the answer
the search returned (scored by the bench): the problems where the vote (tasks/code.py: programs
passing the tests grouped by behaviour on probe calls) picked another program, and whether that
helped or hurt. Also counts the runs that reached a quorum, the programs per run, and the runs
whose graph held a program passing the hidden tests against those that returned one (writing a
correct program against choosing it), beside best_of_n's any@k from the same bench when it ran.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

from thoughtloom.graph import NodeKind
from thoughtloom.store.runs import load_graph, open_run
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.code import CodeProblem
from thoughtloom.tasks.humaneval import HumanEvalTask


async def account(run_dir: Path, store_path: Path) -> None:
    """Print the vote's account for the tot rows of `run_dir`, reading graphs from `store_path`."""
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").open() if line.strip()]
    task = HumanEvalTask()
    store = SQLiteStore(store_path, readonly=True)  # a bench may still be writing to it
    outcome: Counter[str] = Counter()
    changed: list[str] = []
    programs = []
    held: list[str] = []  # problems whose graph held a program passing the hidden tests
    right: dict[tuple[str, str], bool] = {}  # (problem, program whitespace aside) -> passes the hidden tests

    async def passes(problem: CodeProblem, program: str) -> bool:
        """Whether `program` passes `problem`'s hidden tests; each program is run once."""
        key = (problem.id, " ".join(program.split()))
        if key not in right:
            right[key] = bool(await task.acheck_answer(problem, program))
        return right[key]

    for row in rows:
        if row["lane"] != "tot" or not row.get("run_id"):
            continue
        graph = load_graph(store, open_run(store, row["run_id"]).graph_cid).graph
        code = sorted((n for n in graph if n.kind is NodeKind.CODE), key=lambda n: n.id)
        programs.append(len(code))
        passing = [n for n in code if (n.extra.get("grounding") or {}).get("verified") is True]
        problem = task.parse_problem(row["problem_id"])
        for node in code:
            if await passes(problem, node.content):
                held.append(row["problem_id"])
                break
        outcome["reached a quorum" if row["stop_reason"] == "goal_reached" else f"ended {row['stop_reason']}"] += 1
        if not passing:
            outcome["no program passed the visible tests"] += 1
            continue
        first = passing[0].content
        if " ".join(first.split()) == " ".join((row["answer"] or "").split()):
            outcome["answer = first passing program"] += 1
            continue
        first_right = await passes(problem, first)
        vote_right = row["solved"] is True
        key = {(True, False): "vote right, first wrong", (False, True): "vote wrong, first right",
               (True, True): "both right", (False, False): "both wrong"}[(vote_right, bool(first_right))]
        outcome[f"answer != first passing: {key}"] += 1
        changed.append(f"{row['problem_id']} ({key})")
    for what, n in sorted(outcome.items()):
        print(f"{n:4d}  {what}")
    if programs:
        print(f"programs per tot run: mean {sum(programs) / len(programs):.1f}, max {max(programs)}")
    print("changed:", ", ".join(changed) or "none")
    solved = sum(1 for row in rows if row["lane"] == "tot" and row.get("run_id") and row["solved"] is True)
    print(f"tot: a program passing the hidden tests in {len(held)} graphs, returned on {solved}")
    best = [row for row in rows if row["lane"] == "best_of_n"]
    if best:
        print(f"best_of_n: a passing sample on {sum(1 for row in best if row.get('any_correct'))} problems, "
              f"returned on {sum(1 for row in best if row['solved'] is True)} (of {len(best)})")
    lost = sorted(set(held) - {row["problem_id"] for row in rows if row["lane"] == "tot" and row["solved"] is True})
    print("tot held a correct program but returned another:", ", ".join(lost) or "none")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python benchmarks/humaneval_vote.py RUN_DIR STORE.sqlite")
    asyncio.run(account(Path(sys.argv[1]), Path(sys.argv[2])))
