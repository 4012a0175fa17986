"""Math questions: programs the model writes run in the sandbox, and their answers are voted on (tasks/math.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from thoughtloom import SearchConfig, asolve, solve
from thoughtloom.grounding.programs import ProgramRuns
from thoughtloom.grounding.sandbox import SandboxResult
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.run.options import spec_from_options
from thoughtloom.run.spec import implied_task
from thoughtloom.tasks.base import UnsupportedOperation
from thoughtloom.tasks.math import MIN_WEIGHT, MathTask, canonical, coverage, is_math_question, vote_weight
from thoughtloom.tasks.registry import TaskOptions

QUESTION = "Ann has 8 apples and buys 3 bags of 4 more. How many apples does she have?"


def writes(*programs: str) -> ScriptedBackend:
    """A model whose program samples are these, in turn (then the last one again)."""
    queue: Iterator[str] = iter(programs)
    last = [programs[-1]]

    def respond(request: GenerateRequest, index: int) -> str:
        program = next(queue, last[0])
        last[0] = program
        return f"```python\n{program}\n```"

    return ScriptedBackend(responder=respond)


#: QUESTION in words: it gives no number, so every program's vote counts in full (the weighting is tested apart).
IN_WORDS = "Ann has eight apples and buys three bags of four more. How many apples does she have?"


async def run(model: ScriptedBackend, tokens: int = 20_000, question: str = IN_WORDS, **config: object):
    return await asolve(question, task="math", model=model, budget=BudgetLimits(tokens=tokens), controller=False,
                        seed=1, **config)


# --- routing --------------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["What is 17 * 23 + 5?", "Is 91 prime?", QUESTION,
                                      "A shirt costs $12 and a hat costs $8. What do 3 shirts and 2 hats cost?"])
def test_a_question_about_numbers_goes_to_the_math_task(question: str) -> None:
    assert implied_task(TaskOptions(), question, None) == "math"


@pytest.mark.parametrize("question", ["What is the capital of France?", "Plan a 3-day trip to Rome under 900 EUR",
                                      "Why is the sky blue?"])
def test_other_questions_stay_with_the_general_task(question: str) -> None:
    assert implied_task(TaskOptions(), question, None) == "general"


@pytest.mark.parametrize("strategy", ["cove", "recursive"])
def test_a_question_about_numbers_asked_with_a_prose_strategy_goes_to_the_general_task(strategy: str) -> None:
    assert implied_task(TaskOptions(), "What is 17 * 23 + 5?", None, strategy) == "general"


def test_loom_solve_with_cove_on_a_question_about_numbers_builds_a_general_run() -> None:
    spec = spec_from_options({"problem": "What is 17 * 23 + 5?", "strategy": "cove"})
    assert spec.task == "general" and spec.config.strategy == "cove"


def test_a_question_about_numbers_with_a_strategy_math_can_search_stays_math() -> None:
    assert implied_task(TaskOptions(), "What is 17 * 23 + 5?", None, "mcts") == "math"


def test_a_profiles_task_wins_over_the_math_routing() -> None:
    assert implied_task(TaskOptions(), "What is 17 * 23 + 5?", "code") == "code"


def test_is_math_question_needs_a_number() -> None:
    assert not is_math_question("How many moons does Mars have?")


# --- answers as compared --------------------------------------------------------------------


@pytest.mark.parametrize(("printed", "shown"), [("396", "396"), ("396.0", "396"), ("1,200.50", "1200.5"),
                                                ("$18", "18"), ("45%", "45"), ("True", "yes"), ("False", "no"),
                                                ("0.333333333", "0.333333"), ("Paris", "Paris")])
def test_printed_answers_are_compared_in_one_form(printed: str, shown: str) -> None:
    assert canonical(printed) == shown


# --- the search -----------------------------------------------------------------------------


async def test_the_answer_is_what_the_agreeing_programs_printed() -> None:
    result = await run(writes("apples = 8 + 3 * 4\nprint(apples)", "print(8 + 3 * 4)", "print(20)",
                              "print(8 + 3 + 4)", "print(21)"))
    assert result.answer == "20"
    assert result.termination_reason == "goal_reached"


async def test_a_program_that_fails_in_the_sandbox_scores_nothing() -> None:
    result = await run(writes("print(1 / 0)", "print(20)", "print(2 * 10)", "print(4 * 5)", "print(19)"))
    failing = next(n for n in result.graph if n.content == "print(1 / 0)")
    assert failing.score == 0.0
    assert result.grounding[failing.id].verified is False
    assert "ZeroDivisionError" in result.grounding[failing.id].evidence
    assert result.answer == "20"


async def test_a_program_that_is_not_python_is_rejected_before_it_runs() -> None:
    result = await run(writes("print(20", "print(20)", "print(2 * 10)", "print(4 * 5)", "print(40 / 2)"))
    assert result.stats.rejected == 1
    (broken,) = [n for n in result.graph if n.content == "print(20"]
    assert broken.status.value == "failed"
    assert broken.id not in result.grounding


async def test_the_same_program_sampled_five_times_is_five_votes() -> None:
    result = await run(writes("print(8 + 3 * 4)"))
    (program,) = [n for n in result.graph if n.kind.value == "code"]
    assert program.extra["samples"] == 5
    assert result.termination_reason == "goal_reached"
    assert result.usage.calls == 1


async def test_a_lone_program_never_reaches_the_goal_however_it_scores() -> None:
    # One sample, one pass: a quorum of three agreeing samples cannot be met.
    result = await run(writes("print(20)"), breadth=1, one_pass=True)
    assert result.answer == "20"
    assert result.termination_reason != "goal_reached"
    assert result.goal_node is None


async def test_disagreeing_programs_make_the_search_sample_again_until_a_quorum_agrees() -> None:
    first_round = ("print(20)", "print(19)", "print(18)", "print(17)", "print(1 / 0)")
    result = await run(writes(*first_round, "print(20)", "print(4 * 5)", "print(16)"))
    assert result.stats.continuations >= 1
    assert result.termination_reason == "goal_reached"
    assert result.answer == "16"  # 16 was sampled again and again: 8 votes against 20's 3


async def test_a_repeated_sample_adds_a_vote_to_the_program_it_repeats() -> None:
    first_round = ("print(20)", "print(19)", "print(18)", "print(17)", "print(16)")
    result = await run(writes(*first_round, "print(4 * 5)", "print(20)", "print(19)", "print(18)", "print(17)"))
    (twenty,) = [n for n in result.graph if n.content == "print(20)"]
    assert twenty.extra["samples"] == 2
    assert result.answer == "20"  # 20 twice and 4 * 5 once: three votes, more than any other
    assert result.termination_reason == "goal_reached"


async def test_one_pass_keeps_the_plurality_of_one_round_without_a_goal() -> None:
    result = await run(writes("print(20)", "print(19)", "print(20.0)", "print(17)", "print(16)"), one_pass=True)
    assert result.answer == "20"
    assert result.termination_reason == "max_depth"


async def test_no_model_is_asked_to_grade_or_vote() -> None:
    model = writes("print(20)")
    await run(model)
    assert {r.purpose for r in model.calls} == {"generate"}


def test_a_quorum_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="quorum must be at least 1"):
        MathTask(quorum=0)


def test_asking_a_model_to_value_programs_is_refused_with_the_evaluation_that_works() -> None:
    with pytest.raises(UnsupportedOperation, match="^task math has no value prompt; use --evaluation vote$"):
        solve(QUESTION, task="math", model=writes("print(20)"), config=SearchConfig(evaluation="value"),
              controller=False)


# --- the embedded model -----------------------------------------------------------------------


@pytest.mark.local_model
def test_the_embedded_model_says_91_is_not_prime() -> None:
    result = solve("Is 91 prime?", seed=1)
    assert result.task == "math"
    assert result.answer == "no"
    assert result.termination_reason == "goal_reached"


async def test_each_program_says_how_many_samples_printed_its_answer() -> None:
    result = await run(writes("print(20)", "print(4 * 5)", "print(19)", "print(40 / 2)", "print(1 / 0)"))
    notes = {n.content: n.extra["tally"] for n in result.graph if "tally" in n.extra}
    assert notes["print(20)"] == "3 of 5 samples printed 20"
    assert notes["print(19)"] == "1 of 5 samples printed 19"
    assert notes["print(1 / 0)"].startswith("no answer (the program failed")


async def test_an_answer_no_quorum_agreed_on_carries_a_doubt() -> None:
    result = await run(writes("print(20)", "print(19)", "print(20.0)", "print(17)", "print(16)"), one_pass=True)
    assert result.answer_doubt() == "the samples did not agree enough: 2 of 5 samples printed 20"


async def test_an_agreed_answer_carries_no_doubt() -> None:
    result = await run(writes("print(20)"))
    assert result.answer_doubt() is None


# --- programs that leave out numbers of the question ------------------------------------------


def test_coverage_is_the_share_of_the_questions_numbers_the_code_uses() -> None:
    assert coverage(QUESTION, "print(8 + 3 * 4)") == 1.0
    assert coverage(QUESTION, "# 8 apples and 3 bags of 4\nprint(3 * 4)") == pytest.approx(2 / 3)
    assert coverage(QUESTION, "print(20)") == 0.0
    assert coverage("What is the capital of France?", "print('Paris')") == 1.0


def test_a_percentage_may_be_written_as_a_fraction() -> None:
    assert coverage("A 40 dollar shirt is 25% off. What does it cost?", "print(40 * (1 - 0.25))") == 1.0


def test_a_program_that_leaves_out_numbers_of_the_question_counts_less() -> None:
    assert vote_weight(QUESTION, "print(8 + 3 * 4)") == 1.0
    assert vote_weight(QUESTION, "print(3 * 4)") == pytest.approx(4 / 9)
    assert vote_weight(QUESTION, "print(20)") == MIN_WEIGHT


async def test_programs_that_answer_part_of_the_question_do_not_outvote_those_that_answer_it_all() -> None:
    partial = ("print(3 * 4)", "bags = 3 * 4\nprint(bags)", "print(4 * 3)")
    result = await run(writes(*partial, "print(8 + 3 * 4)", "apples = 8 + 4 * 3\nprint(apples)"), question=QUESTION,
                       one_pass=True)
    assert result.answer == "20"  # 2 votes in full against 3 x 4/9


async def test_agreeing_programs_that_leave_out_numbers_do_not_reach_the_goal_alone() -> None:
    result = await run(writes("print(3 * 4)", "bags = 3 * 4\nprint(bags)", "print(4 * 3)", "print(12)", "print(20)"),
                       question=QUESTION, one_pass=True)
    assert result.goal_node is None
    notes = {n.content: n.extra["tally"] for n in result.graph if "tally" in n.extra}
    assert notes["print(3 * 4)"] == ("4 of 5 samples printed 12 (votes 1.58: programs that leave out numbers of the "
                                     "question count less)")


# --- programs are run once ------------------------------------------------------------------


class CountingSandbox:
    """A sandbox double that counts the programs it is asked to run (the real one is tested above)."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def run_python(self, program: str) -> SandboxResult:
        self.ran.append(program)
        await asyncio.sleep(0.01)
        return SandboxResult(exit_code=0, signal=None, stdout="20\n", stderr="")


async def test_a_program_asked_for_twice_at_once_runs_once() -> None:
    box = CountingSandbox()
    runs = ProgramRuns(box)  # type: ignore[arg-type]
    first, second = await asyncio.gather(runs.run("print(20)"), runs.run("print(20)"))
    assert first.answer == second.answer == "20"
    assert box.ran == ["print(20)"]
    assert runs.known("print(20)") == first


def test_one_task_object_serves_runs_in_two_event_loops() -> None:
    task = MathTask()
    for run in range(2):  # each solve() is an asyncio.run() of its own; new programs, so each runs
        programs = [f"x = {run}\nprint({expression})" for expression in ("20", "4 * 5", "8 + 12", "40 / 2", "2 * 10")]
        result = solve(QUESTION, task=task, model=writes(*programs), controller=False, seed=1)
        assert result.answer == "20"


async def test_a_question_about_numbers_compares_sampling_lanes_beside_the_math_search() -> None:
    from thoughtloom.eval.runner import compare_strategies

    model = ScriptedBackend(default="```python\nprint(396)\n```\nThe answer is 396.")
    cmp = await compare_strategies("What is 17 * 23 + 5?", ["io", "cot", "pot", "tot", "cove"], model=model)
    assert cmp.left_out == {}
    assert cmp["tot"][0].answer == cmp["pot"][0].answer == "396"
    assert "- (no checker)" in cmp.table()  # a question given as text has no gold to score against
