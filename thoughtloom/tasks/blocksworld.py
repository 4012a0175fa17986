"""Blocksworld (PlanBench, as llm-reasoners' RAP runs it): stack coloured blocks into a goal arrangement.

A problem is PlanBench's statement ("As initial conditions I have that, ... My goal is to have that
..."); a step is one action in PlanBench's words ("unstack the red block from on top of the blue
block"). Every proposed action is checked by simulating the 4-operator STRIPS domain
(`generated_domain.pddl`: pick-up, put-down, stack, unstack with their preconditions); the task
lists the legal actions of each state, so the model chooses among them and the LM-free control
chooses by chance. A plan is scored as PlanBench's VAL scores it: read the actions from the text
the way llm-reasoners' `text_to_plan_blocksworld` does, then every action's preconditions must
hold when it runs and the goal must hold after the last one (any valid plan counts).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..graph import NodeKind
from .base import ProblemError, Query, Task, Verdict, few_shot_query

Fact = tuple[str, ...]
State = frozenset[Fact]

#: PlanBench's block names (bw_config.yaml's encoded_objects, a-l), in the order its parser searches them.
COLORS = ("red", "blue", "orange", "yellow", "white", "magenta", "black", "cyan", "green", "violet", "silver", "gold")
#: The domain's operators in its file's order: the plan reader takes the first one named on a line.
OPERATORS = ("pick-up", "put-down", "stack", "unstack")
_ARITY = {"pick-up": 1, "put-down": 1, "stack": 2, "unstack": 2}

_STATEMENT = re.compile(r"I have that,?\s*(?P<init>.*?)\.\s*My goal is to have that,?\s*(?P<goal>.*?)\.?\s*"
                        r"(?:My plan is|\[PLAN\]|$)", re.IGNORECASE | re.DOTALL)
_CLAUSE_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+")
_BLOCK = r"the (\w+) block"
_CLAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^{_BLOCK} is clear$"), "clear"),
    (re.compile(rf"^{_BLOCK} is on the table$"), "ontable"),
    (re.compile(rf"^{_BLOCK} is on top of {_BLOCK}$"), "on"),
    (re.compile(r"^the hand is empty$"), "handempty"),
    (re.compile(rf"^the hand is holding {_BLOCK}$"), "holding"),
    (re.compile(rf"^i am holding {_BLOCK}$"), "holding"),
)
# How a model may write an action (the validator's reading, more forgiving than the scorer's).
_ACTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\bpick[- ]?up {_BLOCK}"), "pick-up"),
    (re.compile(rf"\bunstack {_BLOCK} from (?:on top of |on )?{_BLOCK}"), "unstack"),
    (re.compile(rf"\bput[- ]?down {_BLOCK}"), "put-down"),
    (re.compile(rf"(?<!un)\bstack {_BLOCK} (?:on top of|onto|on) {_BLOCK}"), "stack"),
)

# llm-reasoners' bw_config.yaml domain_intro (PlanBench's), line by line.
DOMAIN_INTRO = "\n".join((
    ("I am playing with a set of blocks where I need to arrange the blocks into stacks. Here are the "
     "actions I can do"),
    "",
    "Pick up a block",
    "Unstack a block from on top of another block",
    "Put down a block",
    "Stack a block on top of another block",
    "",
    "I have the following restrictions on my actions:",
    "I can only pick up or unstack one block at a time.",
    "I can only pick up or unstack a block if my hand is empty.",
    ("I can only pick up a block if the block is on the table and the block is clear. A block is clear if "
     "the block has no other blocks on top of it and if the block is not picked up."),
    ("I can only unstack a block from on top of another block if the block I am unstacking was really on "
     "top of the other block."),
    "I can only unstack a block from on top of another block if the block I am unstacking is clear.",
    "Once I pick up or unstack a block, I am holding the block.",
    "I can only put down a block that I am holding.",
    "I can only stack a block on top of another block if I am holding the block being stacked.",
    "I can only stack a block on top of another block if the block onto which I am stacking the block is clear.",
    "Once I put down or stack a block, my hand becomes empty.",
))

# Written for this project (three blocks each, not instances of the data set): (statement, plan).
SOLVED: tuple[tuple[str, str], ...] = (
    ("As initial conditions I have that, the blue block is clear, the hand is empty, the blue block is on top of the "
     "red block, the red block is on top of the orange block and the orange block is on the table.\n"
     "My goal is to have that the orange block is on top of the blue block.",
     "unstack the blue block from on top of the red block\nput down the blue block\n"
     "unstack the red block from on top of the orange block\nput down the red block\npick up the orange block\n"
     "stack the orange block on top of the blue block"),
    ("As initial conditions I have that, the yellow block is clear, the white block is clear, the hand is empty, the "
     "white block is on top of the red block, the red block is on the table and the yellow block is on the table.\n"
     "My goal is to have that the red block is on top of the yellow block.",
     "unstack the white block from on top of the red block\nput down the white block\npick up the red block\n"
     "stack the red block on top of the yellow block"),
)


def statement_of(init: str, goal: str) -> str:
    """PlanBench's statement of a problem from its initial and goal facts (comma-and lists)."""
    return f"As initial conditions I have that, {init.strip()}.\nMy goal is to have that {goal.strip()}."


def statement_prompt(statement: str) -> str:
    """A statement in PlanBench's layout, up to where the plan begins."""
    return f"[STATEMENT]\n{statement}\n\nMy plan is as follows:\n\n[PLAN]"


EXAMPLES: tuple[tuple[str, str], ...] = tuple((statement_prompt(s), f"{plan}\n[PLAN END]") for s, plan in SOLVED)


@dataclass(frozen=True, slots=True)
class Blocks:
    """A Blocksworld problem: the initial state, the goal facts, and the statement as the prompts show it."""

    init: State
    goal: State
    statement: str


def fact_text(fact: Fact) -> str:
    """A fact in PlanBench's words."""
    kind = fact[0]
    if kind == "handempty":
        return "the hand is empty"
    if kind == "on":
        return f"the {fact[1]} block is on top of the {fact[2]} block"
    if kind == "holding":
        return f"the hand is holding the {fact[1]} block"
    return f"the {fact[1]} block is " + ("clear" if kind == "clear" else "on the table")


def parse_facts(text: str, what: str) -> State:
    """PlanBench's comma-and list of facts; ProblemError naming a clause it cannot read."""
    facts: set[Fact] = set()
    for clause in (c.strip().lower() for c in _CLAUSE_SPLIT.split(text.strip().rstrip("."))):
        if not clause:
            continue
        for pattern, kind in _CLAUSES:
            m = pattern.match(clause)
            if m:
                facts.add((kind, *m.groups()))
                break
        else:
            raise ProblemError(f"blocksworld: cannot read {what} {clause!r}; write facts such as 'the red block is "
                               "clear', 'the red block is on top of the blue block', 'the hand is empty'")
    return frozenset(facts)


def action_text(action: Fact) -> str:
    """An action in PlanBench's words (as its gold plans write them)."""
    op, *blocks = action
    if op == "pick-up":
        return f"pick up the {blocks[0]} block"
    if op == "put-down":
        return f"put down the {blocks[0]} block"
    if op == "stack":
        return f"stack the {blocks[0]} block on top of the {blocks[1]} block"
    return f"unstack the {blocks[0]} block from on top of the {blocks[1]} block"


def effect_note(text: str) -> str:
    """What an action (in PlanBench's words) makes true, in PlanBench's words: "the hand is empty and ..."."""
    action = read_action(text)
    if action is None:
        raise ValueError(f"not an action: {text!r}")
    added = sorted(apply(frozenset(), action) - frozenset(), key=lambda f: (f[0] == "handempty", f))
    return " and ".join(fact_text(f) for f in added)


def read_action(text: str) -> Fact | None:
    """The first action a line names, or None."""
    line = " ".join(text.lower().split())
    found = [(m.start(), (op, *m.groups())) for pattern, op in _ACTIONS if (m := pattern.search(line))]
    return min(found)[1] if found else None


def blocks_of(state: State) -> tuple[str, ...]:
    """The blocks a state mentions, in PlanBench's colour order (others after, sorted)."""
    names = {b for fact in state for b in fact[1:]}
    return tuple(sorted(names, key=lambda b: (COLORS.index(b) if b in COLORS else len(COLORS), b)))


def why_not(state: State, action: Fact) -> str | None:
    """Which precondition of the action fails in this state (the domain file's), or None when it may run."""
    op, *args = action
    x = args[0]
    preconditions: dict[str, list[Fact]] = {
        "pick-up": [("clear", x), ("ontable", x), ("handempty",)],
        "put-down": [("holding", x)],
        "stack": [("clear", args[-1]), ("holding", x)],
        "unstack": [("on", x, args[-1]), ("clear", x), ("handempty",)],
    }
    needs = preconditions[op]
    if op in ("stack", "unstack") and args[0] == args[1]:
        return f"{action_text(action)}: a block cannot be on itself"
    missing = [f for f in needs if f not in state]
    return f"{action_text(action)} needs {fact_text(missing[0])}" if missing else None


def apply(state: State, action: Fact) -> State:
    """The state after an action whose preconditions hold (the domain file's effects)."""
    op, *args = action
    x = args[0]
    add: set[Fact]
    drop: set[Fact]
    if op == "pick-up":
        add, drop = {("holding", x)}, {("clear", x), ("ontable", x), ("handempty",)}
    elif op == "put-down":
        add, drop = {("clear", x), ("handempty",), ("ontable", x)}, {("holding", x)}
    elif op == "stack":
        add, drop = {("handempty",), ("clear", x), ("on", x, args[1])}, {("clear", args[1]), ("holding", x)}
    else:
        add, drop = {("holding", x), ("clear", args[1])}, {("on", x, args[1]), ("clear", x), ("handempty",)}
    return frozenset((state - drop) | add)


def legal_actions(state: State) -> tuple[Fact, ...]:
    """Every action whose preconditions hold in this state, in a fixed order."""
    blocks = blocks_of(state)
    candidates: list[Fact] = []
    for x in blocks:
        candidates += [("pick-up", x), ("put-down", x)]
        candidates += [(op, x, y) for op in ("stack", "unstack") for y in blocks if y != x]
    return tuple(a for a in candidates if why_not(state, a) is None)


@dataclass(frozen=True, slots=True)
class PlanCheck:
    """The verdict on a plan: valid (every action could run, the goal holds at the end), and why not."""

    valid: bool
    actions: tuple[Fact, ...]
    reason: str | None = None


def simulate(init: State, goal: State, actions: Sequence[Fact]) -> PlanCheck:
    """Run the plan from the initial state: invalid at the first action whose preconditions fail, or
    when the goal does not hold after the last (VAL's verdict)."""
    state = init
    for i, action in enumerate(actions, 1):
        reason = why_not(state, action)
        if reason is not None:
            return PlanCheck(False, tuple(actions), f"step {i}: {reason}")
        state = apply(state, action)
    missing = sorted(goal - state)
    if missing:
        return PlanCheck(False, tuple(actions), f"after the plan, not yet: {fact_text(missing[0])}")
    return PlanCheck(True, tuple(actions))


def plan_from_text(text: str) -> tuple[Fact, ...]:
    """The actions of a plan written in text, read as llm-reasoners' text_to_plan_blocksworld reads them.

    Lower-cased, 'pick up' / 'put down' joined into the operator names; on each line the first
    operator of the domain's order that is a word of the line, with the block names found on the line
    in the order they appear; a line with no operator, or with another number of blocks than the
    operator takes, is passed over. Text after '[PLAN END]' is not part of the plan.
    """
    text = text.split("[PLAN END]")[0].lower().strip()
    for operator in OPERATORS:
        text = text.replace(operator.replace("-", " "), operator)
    names = [f"{c} block" for c in COLORS]
    plan: list[Fact] = []
    for line in (ln.strip() for ln in text.split("\n")):
        words = line.split()
        op = next((o for o in OPERATORS if o in words), None)
        if op is None:
            continue
        objs = [name for _, name in sorted((line.index(n), n) for n in names if n in line)]
        if len(objs) != _ARITY[op]:
            continue
        plan.append((op, *(o.removesuffix(" block") for o in objs)))
    return tuple(plan)


def check_plan(problem: Blocks, answer: str | None) -> PlanCheck:
    """The benchmark rule on an answer: its plan, read as llm-reasoners reads it, simulated from the initial state."""
    return simulate(problem.init, problem.goal, plan_from_text(answer or ""))


class BlocksworldTask(Task[Blocks]):
    """Blocksworld plans, one simulated action per step."""

    name = "blocksworld"
    description = ("Blocksworld (PlanBench / RAP): 'As initial conditions I have that, ... My goal is to have that "
                   "...'; plans checked by simulation")
    programmatic_answer = True
    # RAP's reward starts from the model's likelihood of each action (its "intuition"): evaluation=prior.
    # Depth 12 reaches the longest of RAP's step buckets (2-12) without being told a problem's length.
    search_defaults = {"generation": "sample", "breadth": 3, "beam": 3, "max_depth": 12, "evaluation": "prior"}
    free_text_steps = False
    lists_choices = True

    def parse_problem(self, text: str) -> Blocks:
        """PlanBench's statement: the initial facts after 'I have that', the goal after 'My goal is to have that'."""
        m = _STATEMENT.search(text)
        if m is None:
            raise ProblemError("blocksworld needs 'As initial conditions I have that, FACTS. My goal is to have that "
                               "FACTS.' (PlanBench's statement)")
        init, goal = parse_facts(m.group("init"), "initial fact"), parse_facts(m.group("goal"), "goal")
        if not goal:
            raise ProblemError("blocksworld: the goal names no fact; write e.g. 'the red block is on top of the blue "
                               "block'")
        return Blocks(init, goal, statement_of(m.group("init"), m.group("goal")))

    def root_content(self, problem: Blocks) -> str:
        """The statement."""
        return problem.statement

    def describe(self, problem: Blocks) -> dict[str, object]:
        """How many blocks and goal facts."""
        return {"blocks": len(blocks_of(problem.init)), "goal_facts": len(problem.goal)}

    # --- state --------------------------------------------------------------------------

    def state(self, problem: Blocks, steps: Sequence[str]) -> State:
        """The state after the (validated) steps."""
        state = problem.init
        for step in steps:
            action = read_action(step)
            assert action is not None, f"validated step is not an action: {step!r}"
            state = apply(state, action)
        return state

    def state_key(self, problem: Blocks, steps: Sequence[str]) -> Hashable:
        """The arrangement reached: two plans reaching it are one state."""
        return self.state(problem, steps)

    def is_goal(self, problem: Blocks, steps: Sequence[str]) -> bool:
        """Every goal fact holds."""
        return problem.goal <= self.state(problem, steps)

    def is_terminal(self, problem: Blocks, steps: Sequence[str]) -> bool:
        """The goal holds: any further action could only undo it."""
        return self.is_goal(problem, steps)

    def thought_kind(self, problem: Blocks, steps: Sequence[str]) -> NodeKind:
        """An action reaching the goal ends a candidate plan."""
        return NodeKind.SOLUTION if self.is_goal(problem, steps) else NodeKind.HYPOTHESIS

    def quality(self, problem: Blocks, steps: Sequence[str], score: float) -> float:
        """1 where the goal is reached; a partial path, however well valued, stays below any goal threshold."""
        return 1.0 if self.is_goal(problem, steps) else score / 2

    # --- generate -----------------------------------------------------------------------

    def _plan_query(self, problem: Blocks, steps: Sequence[str], max_tokens: int, stop: tuple[str, ...]) -> Query:
        statement = statement_prompt(problem.statement)
        so_far = "".join(f"\n{s}" for s in steps)
        q = few_shot_query(DOMAIN_INTRO, EXAMPLES, statement + so_far, max_tokens, stop=stop)
        return Query(q.prompt, max_tokens=q.max_tokens, stop=q.stop,
                     choices=tuple(action_text(a) for a in legal_actions(self.state(problem, steps))))

    def sample(self, problem: Blocks, steps: Sequence[str]) -> Query:
        """The plan so far, continued by one action; every legal action is a choice."""
        return self._plan_query(problem, steps, 24, ("\n",))

    def propose(self, problem: Blocks, steps: Sequence[str], k: int) -> Query:
        """The plan so far, continued to its end: its lines are the candidate next actions."""
        return self._plan_query(problem, steps, 160, ("[PLAN END]", "[STATEMENT]"))

    def parse_proposals(self, problem: Blocks, steps: Sequence[str], text: str) -> list[str]:
        """Each line naming an action, as PlanBench writes it, without repeats."""
        out: list[str] = []
        for line in text.split("[PLAN END]")[0].splitlines():
            action = read_action(line)
            if action is not None and action_text(action) not in out:
                out.append(action_text(action))
        return out

    def parse_sample(self, problem: Blocks, steps: Sequence[str], text: str) -> str | None:
        """The first action named."""
        found = self.parse_proposals(problem, steps, text)
        return found[0] if found else None

    # --- check --------------------------------------------------------------------------

    def validate(self, problem: Blocks, steps: Sequence[str], thought: str) -> Verdict:
        """Accept an action whose preconditions hold now (in PlanBench's words); reject any other."""
        action = read_action(thought)
        if action is None:
            return Verdict(False, thought, "not an action (pick up / unstack / put down / stack a block)")
        reason = why_not(self.state(problem, steps), action)
        if reason is not None:
            return Verdict(False, thought, reason)
        return Verdict(True, action_text(action))

    # --- evaluate -----------------------------------------------------------------------

    def exact_value(self, problem: Blocks, steps: Sequence[str]) -> float | None:
        """1 where the goal holds; otherwise the model values the state."""
        return 1.0 if self.is_goal(problem, steps) else None

    def value(self, problem: Blocks, steps: Sequence[str]) -> Query:
        """RAP's self-evaluation: is the plan so far a good way towards the goal (good / bad)?"""
        plan = "\n".join(steps) or "(nothing yet)"
        user = f"{problem.statement}\nPlan so far:\n{plan}\nIs this plan so far a good way to reach the goal?"
        q = few_shot_query(DOMAIN_INTRO + "\nJudge whether the plan so far brings the goal closer: good or bad.",
                           _VALUE_EXAMPLES, user, 4, stop=("\n",))
        return Query(q.prompt, max_tokens=4, stop=q.stop, choices=("good", "bad"))

    def parse_value(self, problem: Blocks, steps: Sequence[str], texts: Sequence[str]) -> float:
        """The share of samples that say good."""
        return sum(1.0 for t in texts if t.strip().lower().startswith("good")) / max(1, len(texts))

    # --- answer -------------------------------------------------------------------------

    def compose_answer(self, problem: Blocks, steps: Sequence[str], reply: str | None) -> str | None:
        """The plan: one action per line."""
        return "\n".join(steps) if steps else None

    def check_answer(self, problem: Blocks, answer: str | None) -> bool | None:
        """Valid plan (llm-reasoners' reading, VAL's rule)."""
        return check_plan(problem, answer).valid


_VALUE_EXAMPLES = (
    (f"{SOLVED[1][0]}\nPlan so far:\nunstack the white block from on top of the red block\n"
     "Is this plan so far a good way to reach the goal?", "good"),
    (f"{SOLVED[1][0]}\nPlan so far:\npick up the yellow block\nIs this plan so far a good way to reach the goal?",
     "bad"),
)
