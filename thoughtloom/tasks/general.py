"""A general task for any free-text question: generator, evaluator and synthesizer prompts.

Each prompt has a chat form for instruction-tuned models and a completion form for base models
(the embedded one), which only continue text patterns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..llm.types import Message, Prompt
from .base import Query, Task

GENERATOR_SYSTEM = (
    "You are a creative reasoning engine. Given a problem and the current reasoning state, propose "
    "distinct next steps. Each step is a single logical step, clearly different from the others, "
    "and moves toward solving the problem."
)
EVALUATOR_SYSTEM = (
    "You are a critical evaluator of reasoning steps. Judge logical validity, progress toward the "
    "goal, clarity and feasibility. Reply with a single score from 0 to 10."
)
SYNTHESIZER_SYSTEM = (
    "You are a reasoning synthesizer. Given a problem and the best reasoning path found, produce a "
    "clear, final answer. Be concise but complete."
)

_NUMBERED = re.compile(r"^\s*(?:\d+[.):]|[-*•])\s*(.+)$")
_NUM = r"(\d+(?:\.\d+)?)"
# How a score is written, most explicit first: "7/10", "7 out of 10", "Score: 7".
_STATED_SCORES = (
    re.compile(_NUM + r"\s*(?:/|out of)\s*10\b", re.IGNORECASE),
    re.compile(r"\b(?:score|rating|rate it|quality)\b\D{0,12}?" + _NUM, re.IGNORECASE),
)
# Else a bare number that is not a step's number ("Step 2 is sound: 8" scores 8).
_BARE_SCORE = re.compile(r"(?<![\d.])(?<!step )(?<!step)" + _NUM + r"(?![\d.]*\s*[)%])", re.IGNORECASE)
_ARITHMETIC = set("+-*/=×÷^")
_STEP_LABEL = re.compile(r"^(?:\**\s*step\s*\d+\s*[:.)]\**\s*)+", re.IGNORECASE)
_FINAL = re.compile(r"final answer|the answer is|\\boxed\{", re.IGNORECASE)
_FINAL_HINT = "If the reasoning so far already answers the problem, reply 'Final answer: ' and the answer."
_CHOICE = re.compile(r"(?:choice|option|step)?\s*#?(\d+)", re.IGNORECASE)


def score_from(text: str) -> float:
    """A 0-10 score in a reply, scaled to [0, 1]: "7/10", "7 out of 10", "Score: 7" or a bare 7; 0 if none."""
    for form in _STATED_SCORES:
        for m in form.finditer(text):
            if float(m.group(1)) <= 10:
                return float(m.group(1)) / 10.0
    for m in _BARE_SCORE.finditer(text):
        if float(m.group(1)) <= 10 and not _in_arithmetic(text, m.start(1), m.end(1)):
            return float(m.group(1)) / 10.0
    return 0.0


def _in_arithmetic(text: str, start: int, end: int) -> bool:
    """Whether the number at text[start:end] is an operand or result ("48 / 2 = 24"), not a score."""
    before, after = text[:start].rstrip()[-1:], text[end:].lstrip()[:1]
    return before in _ARITHMETIC or after in _ARITHMETIC


def _reasoning(steps: Sequence[str]) -> str:
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(no steps yet)"


class GeneralTask(Task[str]):
    """Any free-text question; no exact validator, so answers are not checked."""

    name = "general"
    description = "any free-text question or problem"
    programmatic_answer = False
    search_defaults = {"breadth": 3, "beam": 2, "max_depth": 3, "generation": "sample"}

    def propose(self, problem: str, steps: Sequence[str], k: int) -> Query:
        """List k distinct next steps."""
        user = (
            f"Problem: {problem}\n\nReasoning so far:\n{_reasoning(steps)}\n\n"
            f"Give {k} distinct possible next steps, one per line, numbered 1 to {k}."
        )
        text = f"Problem: {problem}\nReasoning so far:\n{_reasoning(steps)}\nPossible next steps:\n1."
        return Query(
            Prompt(text=text, messages=(Message("system", GENERATOR_SYSTEM), Message("user", user))),
            max_tokens=120 * k,
            stop=("\nProblem:", "\n\n\n"),
        )

    def parse_proposals(self, problem: str, steps: Sequence[str], text: str) -> list[str]:
        """Numbered or bulleted lines (the completion form starts inside item 1)."""
        lines = text.splitlines()
        out: list[str] = []
        for i, line in enumerate(lines):
            m = _NUMBERED.match(line)
            item = m.group(1).strip() if m else (line.strip() if i == 0 else "")
            if item and item not in out:
                out.append(item)
        return out

    def sample(self, problem: str, steps: Sequence[str]) -> Query:
        """One next step."""
        n = len(steps) + 1
        user = f"Problem: {problem}\n\nReasoning so far:\n{_reasoning(steps)}\n\nGive the single best next step. {_FINAL_HINT}"
        text = f"Problem: {problem}\nReasoning so far:\n{_reasoning(steps)}\nStep {n}:"
        return Query(
            Prompt(text=text, messages=(Message("system", GENERATOR_SYSTEM), Message("user", user))),
            max_tokens=160,
            stop=("\nStep", "\nProblem:", "\n\n"),
        )

    def parse_sample(self, problem: str, steps: Sequence[str], text: str) -> str | None:
        """The step, without a "Step N:" label the model wrote itself (the prompts number the steps)."""
        text = _STEP_LABEL.sub("", text.strip()).strip()
        return text or None

    def is_terminal(self, problem: str, steps: Sequence[str]) -> bool:
        """A step that states the final answer ends its path: later steps would only invent more."""
        return bool(steps) and _FINAL.search(steps[-1]) is not None

    def value(self, problem: str, steps: Sequence[str]) -> Query:
        """A 0-10 score of the path."""
        user = f"Problem: {problem}\n\nReasoning path so far:\n{_reasoning(steps)}\n\nScore the last step from 0 to 10."
        text = f"Problem: {problem}\nReasoning:\n{_reasoning(steps)}\nQuality of the last step on a scale of 0 to 10:"
        return Query(
            Prompt(text=text, messages=(Message("system", EVALUATOR_SYSTEM), Message("user", user))),
            # A base model writes the number and stops at the line's end; an instruct model often
            # says a few words before it ("The step is sound. Score: 7/10").
            max_tokens=32,
            stop=("\n",),
        )

    def parse_value(self, problem: str, steps: Sequence[str], texts: Sequence[str]) -> float:
        """Mean of each sample's score on the 0-10 scale, scaled to [0, 1]; a sample without one counts 0."""
        return sum(score_from(text) for text in texts) / max(1, len(texts))

    def vote(self, problem: str, steps: Sequence[str], candidates: Sequence[str]) -> Query:
        """Which candidate step is most promising."""
        choices = "\n".join(f"Choice {i}: {c}" for i, c in enumerate(candidates, 1))
        body = f"Problem: {problem}\nReasoning so far:\n{_reasoning(steps)}\nCandidate next steps:\n{choices}\n"
        return Query(
            Prompt(
                text=body + "The most promising choice is Choice",
                messages=(
                    Message("system", EVALUATOR_SYSTEM.replace("Reply with a single score from 0 to 10.", "")),
                    Message("user", body + "\nReply with 'The best choice is N'."),
                ),
            ),
            max_tokens=16,
            stop=("\n",),
        )

    def parse_vote(self, problem: str, candidates: Sequence[str], texts: Sequence[str]) -> list[float]:
        """Each candidate's share of the samples naming it."""
        votes = [0] * len(candidates)
        for text in texts:
            m = _CHOICE.search(text)
            if m and 1 <= int(m.group(1)) <= len(candidates):
                votes[int(m.group(1)) - 1] += 1
        return [v / max(1, len(texts)) for v in votes]

    def aggregate(self, problem: str, paths: Sequence[Sequence[str]]) -> Query:
        """Merge several partial solutions into one."""
        parts = "\n\n".join(f"Line of reasoning {i}:\n{_reasoning(p)}" for i, p in enumerate(paths, 1))
        user = f"Problem: {problem}\n\n{parts}\n\nMerge the strongest points of these into one better next step."
        text = f"Problem: {problem}\n{parts}\nOne step that merges the strongest points of these:"
        return Query(
            Prompt(text=text, messages=(Message("system", GENERATOR_SYSTEM), Message("user", user))),
            max_tokens=200,
            stop=("\nProblem:", "\n\n"),
        )

    def refine(self, problem: str, steps: Sequence[str], feedback: str) -> Query:
        """Improve the last step given feedback."""
        user = (
            f"Problem: {problem}\n\nReasoning so far:\n{_reasoning(steps)}\n\nFeedback on the last step: "
            f"{feedback}\n\nRewrite the last step, improved."
        )
        text = f"Problem: {problem}\nReasoning:\n{_reasoning(steps)}\nFeedback: {feedback}\nImproved last step:"
        return Query(
            Prompt(text=text, messages=(Message("system", GENERATOR_SYSTEM), Message("user", user))),
            max_tokens=200,
            stop=("\nProblem:", "\n\n"),
        )

    def synthesize(self, problem: str, steps: Sequence[str]) -> Query:
        """The final answer from the best path."""
        user = f"Problem: {problem}\n\nBest reasoning path:\n{_reasoning(steps)}\n\nGive the final answer."
        text = f"Problem: {problem}\nReasoning:\n{_reasoning(steps)}\nFinal answer:"
        return Query(
            Prompt(text=text, messages=(Message("system", SYNTHESIZER_SYSTEM), Message("user", user))),
            max_tokens=300,
            stop=("\nProblem:", "\n\n\n"),
        )
