"""The Task seam: a task bundles its prompts (prompter), its parsers and its exact validator.

The engine never looks inside a thought; it asks the task to build each prompt, to parse each
reply, to check each thought exactly where it can, and to say when a state solves the problem.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ..graph import NodeKind
from ..grounding.files import FileRefused, read_utf8
from ..llm.types import Prompt, few_shot_messages
from .evaluation import Evaluation
from .query import Query, Sampled, Tally, Verdict

if TYPE_CHECKING:
    from ..grounding.types import Grounder, GroundingResult
    from .recursion.hooks import RecursiveHooks

P = TypeVar("P")  # a task's parsed problem


def one_line(text: str, n: int) -> str:
    """Text on one line, cut to at most n characters (with "..." when cut)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def few_shot_query(system: str, examples: Sequence[tuple[str, str]], user: str, max_tokens: int,
                   stop: tuple[str, ...] = (), schema: str | None = None, temperature: float | None = None) -> Query:
    """One prompt in both forms: few-shot chat turns (instruct models), and the same examples as completion text."""
    shots = "".join(f"{asked}\n{answered}\n\n" for asked, answered in examples)
    text = f"{system}\n\n{shots}{user}\n"
    return Query(Prompt(text=text, messages=few_shot_messages(system, examples, user)), max_tokens=max_tokens,
                 stop=stop, schema=schema, temperature=temperature)


def comma_list(text: str, option: str, error: type[Exception] = ValueError) -> list[str]:
    """The names of a comma-separated option ("calc,python"), trimmed; `error` (one line) for an empty or
    repeated name."""
    names = [part.strip() for part in text.split(",")]
    if not any(names):
        raise error(f"{option} {text!r} names nothing; give comma-separated names")
    if not all(names):
        raise error(f"{option} {text!r} holds an empty name; separate names with single commas")
    repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if repeated is not None:
        raise error(f"{option} {text!r} names {repeated!r} twice; give each name once")
    return names


class ProblemError(ValueError):
    """The problem text is not a valid instance of the task; the message says how to fix it."""


def read_input_file(path: str | Path, what: str, *, gzipped: bool = False) -> str:
    """A user's UTF-8 text file, only if it is a regular file of at most grounding.files.MAX_FILE_BYTES;
    ProblemError (one line) otherwise."""
    try:
        return read_utf8(path, what=what, gzipped=gzipped)
    except FileRefused as exc:
        raise ProblemError(str(exc)) from None


class UnsupportedOperation(ValueError):
    """The task has no prompt for this operator (e.g. aggregation in Game of 24)."""


class Task(Generic[P]):
    """Base class of tasks. Subclasses override what they support; defaults are safe no-ops."""

    name: ClassVar[str] = "task"
    description: ClassVar[str] = ""
    #: True when final answers are composed by the task itself (no synthesis call needed).
    programmatic_answer: ClassVar[bool] = True
    #: SearchConfig fields this task works best with; the user's flags override them.
    search_defaults: ClassVar[dict[str, Any]] = {}
    #: False when a step must have the task's own form (Game of 24's "a op b = c (left: ...)"): the
    #: recursive strategy's generic free-text goals then do not apply (see `recursion`).
    free_text_steps: ClassVar[bool] = True
    #: True when the task's step and value prompts list every valid reply (Query.choices): the
    #: model then chooses among them, and the `random` control lane can choose by chance.
    lists_choices: ClassVar[bool] = False
    #: True when every thought is a whole answer (a program), not a step toward one: a deeper
    #: thought is then a revision, not progress, and the best thought is the best scored at any depth.
    whole_answers: ClassVar[bool] = False

    # --- problem ------------------------------------------------------------------------

    def parse_problem(self, text: str) -> P:
        """Turn the user's problem text into the task's problem; raise ProblemError if invalid."""
        if not text.strip():
            raise ProblemError(f"empty problem for task {self.name}; give the problem text")
        return text.strip()  # type: ignore[return-value]

    def root_content(self, problem: P) -> str:
        """Content of the input node."""
        return str(problem)

    def describe(self, problem: P) -> dict[str, Any]:
        """Facts about the problem worth keeping in results (ids, sizes)."""
        return {}

    async def prepare(self, problem: P) -> P:
        """Work done once before the search (e.g. reproducing a bug); raise ProblemError if it fails."""
        return problem

    # --- grounding ----------------------------------------------------------------------

    def grounders(self, problem: P) -> list[Grounder]:
        """Grounders that test this task's thoughts against reality (none by default)."""
        return []

    def grounded_goal(self, problem: P, steps: Sequence[str], result: GroundingResult) -> bool:
        """True when this grounding result proves the thought solves the problem."""
        return False

    def revise(self, problem: P, steps: Sequence[str], feedback: str) -> Query | None:
        """A prompt for a better next thought, given why grounding failed the last one; None: ignore it."""
        return None

    # --- generate -----------------------------------------------------------------------

    def propose(self, problem: P, steps: Sequence[str], k: int) -> Query:
        """One call that lists several next steps."""
        raise UnsupportedOperation(f"task {self.name} has no propose prompt; use --generation sample")

    def parse_proposals(self, problem: P, steps: Sequence[str], text: str) -> list[str]:
        """The next steps listed in a propose reply."""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def sample(self, problem: P, steps: Sequence[str]) -> Query:
        """One call per independent next-step sample."""
        raise UnsupportedOperation(f"task {self.name} has no sample prompt; use --generation propose")

    def parse_sample(self, problem: P, steps: Sequence[str], text: str) -> str | None:
        """The thought in one sample reply, or None if there is none."""
        text = text.strip()
        return text or None

    # --- check --------------------------------------------------------------------------

    def validate(self, problem: P, steps: Sequence[str], thought: str) -> Verdict:
        """Exact check of a proposed thought: accept, repair or reject it."""
        return Verdict(True, thought)

    def state_key(self, problem: P, steps: Sequence[str]) -> Hashable:
        """Normalized state: two paths with equal keys are the same state and expand once."""
        return tuple(" ".join(s.lower().split()) for s in steps)

    def is_terminal(self, problem: P, steps: Sequence[str]) -> bool:
        """True when no further step makes sense from this state."""
        return False

    def is_goal(self, problem: P, steps: Sequence[str]) -> bool:
        """True when this state is known to solve the problem."""
        return False

    def natural_depth(self, problem: P) -> int | None:
        """The number of steps every answer takes, when the task fixes it; None when open-ended."""
        return None

    def thought_kind(self, problem: P, steps: Sequence[str]) -> NodeKind:
        """The node kind of the last step."""
        return NodeKind.HYPOTHESIS

    def quality(self, problem: P, steps: Sequence[str], score: float) -> float:
        """How good this thought is as an answer, in [0, 1]; the controller's thresholds apply to it."""
        return score

    # --- evaluate -----------------------------------------------------------------------

    def exact_value(self, problem: P, steps: Sequence[str]) -> float | None:
        """A value the task can compute exactly (no model call), or None."""
        return None

    def value(self, problem: P, steps: Sequence[str]) -> Query:
        """A prompt that values one state."""
        raise UnsupportedOperation(f"task {self.name} has no value prompt; use --evaluation vote")

    def parse_value(self, problem: P, steps: Sequence[str], texts: Sequence[str]) -> float:
        """A value in [0, 1] from the value samples."""
        raise UnsupportedOperation(f"task {self.name} cannot parse values")

    def parse_evaluation(self, problem: P, steps: Sequence[str], texts: Sequence[str]) -> Evaluation:
        """The value samples as an Evaluation; by default parse_value's number alone (no reasoning, no verdict).

        A task whose evaluator explains itself (the general task) returns its reasoning and
        verdict too; the engine keeps them on the node (node.extra["evaluation"]).
        """
        return Evaluation(self.parse_value(problem, steps, texts))

    def vote(self, problem: P, steps: Sequence[str], candidates: Sequence[str]) -> Query:
        """A prompt that asks which candidate next step is best."""
        raise UnsupportedOperation(f"task {self.name} has no vote prompt; use --evaluation value")

    def parse_vote(self, problem: P, candidates: Sequence[str], texts: Sequence[str]) -> list[float]:
        """Each candidate's share of the votes."""
        raise UnsupportedOperation(f"task {self.name} cannot parse votes")

    async def tally(self, problem: P, steps: Sequence[str], thoughts: Sequence[Sampled]) -> Tally | None:
        """A vote the task counts itself, with no model, over all the sibling thoughts (the answers
        their programs agree on); None: the model votes.
        """
        return None

    # --- aggregate and refine -----------------------------------------------------------

    def aggregate(self, problem: P, paths: Sequence[Sequence[str]]) -> Query:
        """A prompt that merges several thoughts into one."""
        raise UnsupportedOperation(f"task {self.name} does not support aggregation")

    def refine(self, problem: P, steps: Sequence[str], feedback: str) -> Query:
        """A prompt that improves the last step given feedback."""
        raise UnsupportedOperation(f"task {self.name} does not support refinement")

    def parse_thought(self, problem: P, text: str) -> str | None:
        """The thought in an aggregate or refine reply."""
        text = text.strip()
        return text or None

    # --- answer -------------------------------------------------------------------------

    def synthesize(self, problem: P, steps: Sequence[str]) -> Query | None:
        """A prompt for the final answer from the best path; None if the task composes it itself."""
        return None

    def compose_answer(self, problem: P, steps: Sequence[str], reply: str | None) -> str | None:
        """The final answer from the best path (and the synthesis reply, when there was one)."""
        if reply is not None:
            return reply.strip() or None
        return steps[-1] if steps else None

    async def acheck_answer(self, problem: P, answer: str | None) -> bool | None:
        """check_answer for checks that must run something (hidden tests in a sandbox)."""
        return self.check_answer(problem, answer)

    def check_answer(self, problem: P, answer: str | None) -> bool | None:
        """The task's verdict on a final answer; None when the task cannot tell."""
        return None

    # --- recursive decomposition (--strategy recursive) ---------------------------------

    def recursion(self, problem: P) -> RecursiveHooks | None:
        """The task's own decomposition hooks; None: the generic model-driven ones."""
        return None
