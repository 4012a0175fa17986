"""A general task for any free-text question: generator, evaluator and synthesizer prompts.

Each prompt has a chat form for instruction-tuned models and a completion form for base models
(the embedded one), which only continue text patterns. A GeneralTask may be given instructions,
worked examples, its own propose / evaluate / answer prompts and an answer checker: that is what a
task file declares (run/taskfile.py builds a `FileTask` from one).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..grounding.equations import ArithmeticGrounder
from ..grounding.types import Grounder
from ..llm.types import Message, Prompt
from .answers import unlabelled
from .base import Query, Task, few_shot_query
from .checkers import Checker
from .evaluation import (
    EVALUATION_SCHEMA,
    EVALUATION_TOKENS,
    Evaluation,
    judge,
    read_evaluation,
)

GENERATOR_SYSTEM = (
    "You are a creative reasoning engine. Given a problem and the current reasoning state, propose "
    "distinct next steps. Each step is a single logical step, clearly different from the others, "
    "and moves toward solving the problem."
)
_JUDGE = (
    "You are a critical evaluator of reasoning steps. Judge logical validity, progress toward the "
    "goal, clarity and feasibility. "
)
EVALUATOR_SYSTEM = (
    _JUDGE + "Reply with a JSON object: \"reasoning\" (why, in a sentence or two), \"score\" (from 0 to 10) and "
    "\"is_promising\" (true if this path is worth exploring further)."
)
SYNTHESIZER_SYSTEM = (
    "You are a reasoning synthesizer. Given a problem and the best reasoning path found, produce a "
    "clear, final answer. Be concise but complete."
)

_NUMBERED = re.compile(r"^\s*(?:\d+[.):]|[-*•])\s*(.+)$")
_STEP_LABEL = re.compile(r"^(?:\**\s*step\s*\d+\s*[:.)]\**\s*)+", re.IGNORECASE)
# "Final answer: Final answer: X" (the model repeating the prompt's cue): one label is enough.
_REPEATED_FINAL = re.compile(r"^(final answer:\s*)(?:'?final answer:\s*)+", re.IGNORECASE)
_FINAL = re.compile(r"final answer|the answer is|\\boxed\{", re.IGNORECASE)
_FINAL_HINT = "If the reasoning so far already answers the problem, reply 'Final answer: ' and the answer."
_CHOICE = re.compile(r"(?:choice|option|step)?\s*#?(\d+)", re.IGNORECASE)


def vote_schema(candidates: int) -> str:
    """The reply a vote asks for: {"choice": N}, N one of the candidates' numbers (1-based)."""
    return json.dumps({"type": "object", "properties": {"choice": {"enum": list(range(1, candidates + 1))}},
                       "required": ["choice"]}, separators=(",", ":"))


def _json_choice(text: str) -> int | None:
    """The choice in a {"choice": N} reply; None when the reply is not that JSON."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    choice = data.get("choice") if isinstance(data, dict) else None
    return choice if isinstance(choice, int) and not isinstance(choice, bool) else None


def score_from(text: str) -> float:
    """The score one reply states, in [0, 1] (see evaluation.read_evaluation); 0 if it states none."""
    evaluation = read_evaluation(text)
    return 0.0 if evaluation is None else evaluation.score


def _reasoning(steps: Sequence[str]) -> str:
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(no steps yet)"


#: The prompts a task file may write itself, and the placeholders each may use.
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    "propose": ("problem", "steps", "k"),
    "evaluate": ("problem", "steps"),
    "answer": ("problem", "steps"),
}


@dataclass(frozen=True, slots=True)
class TaskExample:
    """A worked example: a problem, its answer, and optionally the reasoning that reaches it."""

    problem: str
    answer: str
    reasoning: str = ""


class GeneralTask(Task[str]):
    """Any free-text question; no exact validator, so answers are not checked (the arithmetic a
    thought writes out is: `grounding/equations.py`). With a `checker`, a labelled answer can be
    (`checker.check(answer, gold)`: what `loom bench` scores a labelled data set by)."""

    name = "general"
    description = "any free-text question or problem"
    programmatic_answer = False
    # Seed 001's prune threshold: a thought its evaluator scores below 3 of 10 is not expanded.
    search_defaults: ClassVar[dict[str, Any]] = {"breadth": 3, "beam": 2, "max_depth": 3, "generation": "sample",
                                                  "prune_threshold": 0.3}

    def __init__(self, *, instructions: str = "", examples: Sequence[TaskExample] = (),
                 prompts: Mapping[str, str] | None = None, checker: Checker | None = None) -> None:
        #: Said in every system prompt (what the task is, how to write an answer).
        self.instructions = instructions.strip()
        #: Worked examples: shown before the problem in the answer prompt and in the bench's io/cot prompts.
        self.examples = tuple(examples)
        #: The user's own prompt templates by PROMPT_FIELDS name ("{problem}" and the like filled in).
        self.prompts = dict(prompts or {})
        #: How an answer is compared with a labelled gold answer (None: it cannot be).
        self.checker = checker

    def _system(self, base: str) -> str:
        return f"{base} {self.instructions}" if self.instructions else base

    def _query(self, system: str, text: str, user: str, max_tokens: int, stop: tuple[str, ...],
               schema: str | None = None) -> Query:
        """One prompt in both forms: completion `text`, and the chat turns (system with the instructions, `user`)."""
        return Query(Prompt(text=text, messages=(Message("system", self._system(system)), Message("user", user))),
                     max_tokens=max_tokens, stop=stop, schema=schema)

    def _own(self, name: str, problem: str, steps: Sequence[str], **more: Any) -> str | None:
        """The task file's prompt `name`, filled in; None when it wrote none."""
        template = self.prompts.get(name)
        return None if template is None else template.format(problem=problem, steps=_reasoning(steps), **more)

    def grounders(self, problem: str) -> list[Grounder]:
        """Every equation a thought writes out (`17 * 23 = 391`) computed exactly: a wrong one fails the thought."""
        return [ArithmeticGrounder()]

    def propose(self, problem: str, steps: Sequence[str], k: int) -> Query:
        """List k distinct next steps."""
        own = self._own("propose", problem, steps, k=k)
        user = own or (
            f"Problem: {problem}\n\nReasoning so far:\n{_reasoning(steps)}\n\n"
            f"Give {k} distinct possible next steps, one per line, numbered 1 to {k}."
        )
        text = f"{own}\n1." if own else \
            f"Problem: {problem}\nReasoning so far:\n{_reasoning(steps)}\nPossible next steps:\n1."
        return self._query(GENERATOR_SYSTEM, text, user, 120 * k, ("\nProblem:", "\n\n\n"))

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
        user = (f"Problem: {problem}\n\nReasoning so far:\n{_reasoning(steps)}\n\n"
                f"Give the single best next step. {_FINAL_HINT}")
        text = f"Problem: {problem}\nReasoning so far:\n{_reasoning(steps)}\nStep {n}:"
        return self._query(GENERATOR_SYSTEM, text, user, 160, ("\nStep", "\nProblem:", "\n\n"))

    def parse_sample(self, problem: str, steps: Sequence[str], text: str) -> str | None:
        """The step, without a "Step N:" label the model wrote itself (the prompts number the steps)."""
        text = _REPEATED_FINAL.sub(r"\1", _STEP_LABEL.sub("", text.strip()).strip())
        return text or None

    def is_terminal(self, problem: str, steps: Sequence[str]) -> bool:
        """A step that states the final answer ends its path: later steps would only invent more."""
        return bool(steps) and _FINAL.search(steps[-1]) is not None

    def value(self, problem: str, steps: Sequence[str]) -> Query:
        """An evaluation of the path's last step: reasoning, a 0-10 score and whether it is promising, as JSON."""
        reply = 'Reply with JSON: {"reasoning": "why", "score": 0 to 10, "is_promising": true or false}.'
        own = self._own("evaluate", problem, steps)
        user = f"{own}\n{reply}" if own else \
            f"Problem: {problem}\n\nReasoning path so far:\n{_reasoning(steps)}\n\nEvaluate the last step. {reply}"
        # A base model continues this with a number; where the schema is enforced, with the JSON record.
        text = f"{own}\nScore from 0 to 10:" if own else \
            f"Problem: {problem}\nReasoning:\n{_reasoning(steps)}\nQuality of the last step on a scale of 0 to 10:"
        # Where the backend enforces the schema the reply is JSON; elsewhere a base model writes
        # a number and stops at the line's end, an instruct model its reasons and then a score.
        return self._query(EVALUATOR_SYSTEM, text, user, EVALUATION_TOKENS, ("\n",), EVALUATION_SCHEMA)

    def parse_evaluation(self, problem: str, steps: Sequence[str], texts: Sequence[str]) -> Evaluation:
        """The samples' evaluations as one: mean stated score, their reasons, the verdict (see evaluation.judge)."""
        return judge(texts)

    def parse_value(self, problem: str, steps: Sequence[str], texts: Sequence[str]) -> float:
        """The combined evaluation's score in [0, 1]."""
        return judge(texts).score

    def vote(self, problem: str, steps: Sequence[str], candidates: Sequence[str]) -> Query:
        """Which candidate step is most promising."""
        choices = "\n".join(f"Choice {i}: {c}" for i, c in enumerate(candidates, 1))
        body = f"Problem: {problem}\nReasoning so far:\n{_reasoning(steps)}\nCandidate next steps:\n{choices}\n"
        # Where the backend enforces it the reply is {"choice": N}; elsewhere the text above.
        return self._query(_JUDGE, body + "The most promising choice is Choice",
                           body + "\nReply with 'The best choice is N'.", 16, ("\n",), vote_schema(len(candidates)))

    def parse_vote(self, problem: str, candidates: Sequence[str], texts: Sequence[str]) -> list[float]:
        """Each candidate's share of the samples naming it: {"choice": N} as JSON, else "Choice N" in text."""
        votes = [0] * len(candidates)
        for text in texts:
            choice = _json_choice(text)
            if choice is None:
                m = _CHOICE.search(text)
                choice = int(m.group(1)) if m else None
            if choice is not None and 1 <= choice <= len(candidates):
                votes[choice - 1] += 1
        return [v / max(1, len(texts)) for v in votes]

    def aggregate(self, problem: str, paths: Sequence[Sequence[str]]) -> Query:
        """Merge several partial solutions into one."""
        parts = "\n\n".join(f"Line of reasoning {i}:\n{_reasoning(p)}" for i, p in enumerate(paths, 1))
        user = f"Problem: {problem}\n\n{parts}\n\nMerge the strongest points of these into one better next step."
        text = f"Problem: {problem}\n{parts}\nOne step that merges the strongest points of these:"
        return self._query(GENERATOR_SYSTEM, text, user, 200, ("\nProblem:", "\n\n"))

    def refine(self, problem: str, steps: Sequence[str], feedback: str) -> Query:
        """Improve the last step given feedback."""
        user = (
            f"Problem: {problem}\n\nReasoning so far:\n{_reasoning(steps)}\n\nFeedback on the last step: "
            f"{feedback}\n\nRewrite the last step, improved."
        )
        text = f"Problem: {problem}\nReasoning:\n{_reasoning(steps)}\nFeedback: {feedback}\nImproved last step:"
        return self._query(GENERATOR_SYSTEM, text, user, 200, ("\nProblem:", "\n\n"))

    def synthesize(self, problem: str, steps: Sequence[str]) -> Query:
        """The final answer from the best path."""
        own = self._own("answer", problem, steps)
        if own is None and not self.examples and not self.instructions:
            user = f"Problem: {problem}\n\nBest reasoning path:\n{_reasoning(steps)}\n\nGive the final answer."
            text = f"Problem: {problem}\nReasoning:\n{_reasoning(steps)}\nFinal answer:"
            return self._query(SYNTHESIZER_SYSTEM, text, user, 300, ("\nProblem:", "\n\n\n"))
        # The examples show the answer's form: the reply ends in a "Final answer:" line like theirs.
        shots = [(f"Problem: {ex.problem}", f"{ex.reasoning}\nFinal answer: {ex.answer}".strip())
                 for ex in self.examples]
        user = own or (f"Problem: {problem}\n\nBest reasoning path:\n{_reasoning(steps)}\n\n"
                       "Give the final answer on a last line 'Final answer: ANSWER'.")
        return few_shot_query(self._system(SYNTHESIZER_SYSTEM), shots, user, 300, stop=("\nProblem:", "\n\n\n"))

    def compose_answer(self, problem: str, steps: Sequence[str], reply: str | None) -> str | None:
        """The synthesized answer, without the "Final answer:" label the prompt's cue invites."""
        return unlabelled(super().compose_answer(problem, steps, reply))


class FileTask(GeneralTask):
    """A task declared in a task file (run/taskfile.py:load_task): the general task with the file's
    name, instructions, prompts, examples, checker and search defaults (set per file on a subclass)."""

    name = "file"
    description = "a task declared in a task file"
    #: The file it was read from ("" for a task declared in Python: thoughtloom.task).
    source: ClassVar[str] = ""
    #: What declared it, as a task file's keys (plain data): a stored run of a task declared in Python keeps it
    #: to rebuild the task (run/taskfile.py:declared_task).
    declaration: ClassVar[Mapping[str, Any]] = {}

    def declared(self) -> dict[str, Any] | None:
        """The declaration a stored run keeps, for a task declared in Python (None: one read from a file, which a
        stored run names instead)."""
        return None if self.source else copy.deepcopy(dict(self.declaration))


def file_task(
    name: str, description: str, source: str, search_defaults: Mapping[str, Any],
    declaration: Mapping[str, Any] | None = None, **settings: Any
) -> FileTask:
    """A FileTask named `name`, with the general task's search defaults under the file's own."""
    cls = type(f"FileTask_{name}", (FileTask,), {
        "name": name, "description": description, "source": source,
        "declaration": copy.deepcopy(dict(declaration or {})),
        "search_defaults": {**GeneralTask.search_defaults, **search_defaults},
    })
    task: FileTask = cls(**settings)
    return task
