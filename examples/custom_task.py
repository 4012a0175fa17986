"""A task of your own: reach a target number from a start with "+ 1" and "* 2" steps.

It shows what a task is made of: a problem parser, a prompt proposing next steps, an exact
validator that recomputes (and repairs) each proposed step, an exact value (no model call to
score a state), a goal test and an answer check.

Use it from Python:

    import thoughtloom
    from custom_task import ReachTask
    result = thoughtloom.solve("3 10", task=ReachTask(), model="openai:gpt-4o-mini")

or install it so `loom tasks`, `loom solve --task reach`, `loom bench`, `loom resume` and
`loom replay` know it by name: in your package's pyproject.toml,

    [project.entry-points."thoughtloom.tasks"]
    reach = "custom_task:ReachTask"

Run this file to solve "3 10" with a scripted stand-in for a model (no download, no key):

    python examples/custom_task.py
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from thoughtloom import ProblemError, Query, Task, Verdict
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest, Prompt

_STEP = re.compile(r"^\s*(-?\d+)\s*([+*])\s*(\d+)\s*=\s*(-?\d+)\s*$")

FEW_SHOT = """Reach the target from the start. Each step is "x + 1 = y" or "x * 2 = y".
List the possible next steps, one per line.
Start: 5  Target: 12  Now: 5
Possible next steps:
5 + 1 = 6
5 * 2 = 10
"""


def _step(now: int, thought: str) -> Verdict:
    """One step from `now`, recomputed: repaired when its result is wrong, rejected when it is not a step from `now`."""
    match = _STEP.match(thought)
    if not match:
        return Verdict(False, thought, 'not a step of the form "x + 1 = y" or "x * 2 = y"')
    x, op, operand, claimed = int(match[1]), match[2], int(match[3]), int(match[4])
    if x != now:
        return Verdict(False, thought, f"starts from {x}, but the number reached is {now}")
    if (op, operand) not in (("+", 1), ("*", 2)):
        return Verdict(False, thought, 'only "+ 1" and "* 2" are allowed')
    result = now + 1 if op == "+" else now * 2
    return Verdict(True, f"{now} {op} {operand} = {result}", None if claimed == result else f"{claimed} corrected to {result}")


class ReachTask(Task[tuple[int, int]]):
    """Reach a target number from a start with "+ 1" and "* 2" steps."""

    name: ClassVar[str] = "reach"
    description: ClassVar[str] = 'reach a target from a start with "+ 1" and "* 2" steps ("3 10"); exact steps'
    search_defaults: ClassVar[dict[str, object]] = {"strategy": "bfs", "max_depth": 6, "beam": 3}

    def parse_problem(self, text: str) -> tuple[int, int]:
        """"START TARGET", two whole numbers with START <= TARGET."""
        parts = text.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ProblemError(f'task reach wants "START TARGET" (two whole numbers); got {text!r}')
        start, target = int(parts[0]), int(parts[1])
        if start > target or start < 1:
            raise ProblemError(f"task reach needs 1 <= START <= TARGET; got {start} {target}")
        return start, target

    def _now(self, problem: tuple[int, int], steps: Sequence[str]) -> int:
        # Every kept step was validated, so its result is exact.
        return int(steps[-1].rsplit("=", 1)[1]) if steps else problem[0]

    def propose(self, problem: tuple[int, int], steps: Sequence[str], k: int) -> Query:
        """One call listing the next steps from the number reached so far."""
        start, target = problem
        text = f"{FEW_SHOT}Start: {start}  Target: {target}  Now: {self._now(problem, steps)}\nPossible next steps:\n"
        return Query(Prompt(text=text), max_tokens=40, stop=("\n\n", "Start:"))

    def validate(self, problem: tuple[int, int], steps: Sequence[str], thought: str) -> Verdict:
        """Recompute the step: repair a wrong result, reject a step from the wrong number or another operation."""
        return _step(self._now(problem, steps), thought)

    def is_terminal(self, problem: tuple[int, int], steps: Sequence[str]) -> bool:
        """Past the target there is no way back."""
        return self._now(problem, steps) >= problem[1]

    def is_goal(self, problem: tuple[int, int], steps: Sequence[str]) -> bool:
        """The target is reached."""
        return self._now(problem, steps) == problem[1]

    def exact_value(self, problem: tuple[int, int], steps: Sequence[str]) -> float:
        """Closer to the target is better; overshooting is worthless."""
        now, target = self._now(problem, steps), problem[1]
        return 0.0 if now > target else now / target

    def compose_answer(self, problem: tuple[int, int], steps: Sequence[str], reply: str | None) -> str | None:
        """The steps, in order, when they reach the target; None (no answer) otherwise."""
        return "; ".join(steps) if self.is_goal(problem, steps) else None

    def check_answer(self, problem: tuple[int, int], answer: str | None) -> bool:
        """Replay the steps exactly: each from the last result, ending at the target."""
        now = problem[0]
        for part in (answer or "").split(";"):
            verdict = _step(now, part)
            if not verdict.ok or verdict.repaired:
                return False
            now = int(verdict.thought.rsplit("=", 1)[1])
        return now == problem[1]


def scripted_model() -> ScriptedBackend:
    """A stand-in for a model that proposes both steps from the number in the prompt (a few wrongly summed)."""

    def propose(request: GenerateRequest, index: int) -> str:
        now = int(re.findall(r"Now: (-?\d+)", request.prompt.as_text())[-1])
        return f"{now} + 1 = {now + 2}\n{now} * 2 = {now * 2}"  # the "+ 1" result is wrong: the task repairs it

    return ScriptedBackend(responder=propose)


if __name__ == "__main__":
    import thoughtloom

    result = thoughtloom.solve("3 10", task=ReachTask(), model=scripted_model(), controller=False)
    print(f"answer: {result.answer}")
    print(f"stopped: {result.termination_reason}, {len(result.graph)} thoughts")
