"""Every sampling lane in both prompt forms: base models get the unchanged few-shot completion text,
instruct models get chat messages, and the lane reads a realistic chat reply's answer through the
real lane code (scripted OpenAI-compatible server, chat endpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.eval.datasets import DATASETS, Dataset, Problem
from thoughtloom.eval.lanes import LaneError, check_lane, run_lane
from thoughtloom.eval.prompts import PROMPTS, answer_from, calculator_call, own_turn
from thoughtloom.eval.runner import BenchOptions, build_protocol
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import Message

#: The completion prompts as they were before the chat forms existed, rendered for "<PROBLEM>".
OLD_TEXT = json.loads((Path(__file__).parent / "fixtures" / "bench_completion_prompts.json").read_text())

NATALIA = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
           "How many clips did Natalia sell altogether in April and May?")
COUNTRIES = "Maria flew from Peru to Chile, and her heart stayed in Peru."
HOTPOT = ("Lake Orra: Lake Orra is a lake in the Vell valley. The town of Brisk lies on its northern shore.\n"
          "Brisk: Brisk is a town founded in 1790 by Ada Venn.\n"
          "Question: Who founded the town on the northern shore of Lake Orra?")

#: family -> (data set, problem in its loader's form)
PROBLEMS: dict[str, tuple[str, Problem]] = {
    "game24": ("game24", Problem("1", "1 1 4 6", "1 1 4 6", [1, 1, 4, 6])),
    "gsm8k": ("gsm8k", Problem("0", NATALIA, NATALIA, "72")),
    "sorting": ("sorting32", Problem("0", "[3, 1, 2, 1]", "[3, 1, 2, 1]", {"unsorted": [3, 1, 2, 1]})),
    "set_intersection": ("set_intersection32", Problem(
        "0", "[3, 14, 7, 22] [22, 1, 3]", "Set 1: [3, 14, 7, 22]\nSet 2: [22, 1, 3]",
        {"set1": [3, 14, 7, 22], "set2": [22, 1, 3], "intersection": [3, 22]})),
    "keyword_counting": ("keyword_counting", Problem("0", COUNTRIES, COUNTRIES, ["Peru", "Chile", "Peru"])),
    "hotpotqa": ("hotpotqa", Problem("0", HOTPOT, HOTPOT, "Ada Venn")),
}

# Realistic instruct-model replies (the shapes Qwen2.5-Coder-0.5B-Instruct writes): reasoning first,
# the answer last, with markdown, LaTeX or code fences around it.
CHAT_IO = {
    "game24": "To make 24 from 1, 1, 4 and 6, multiply them all:\n\n1 * 1 * 4 * 6 = 24\n\n"
              "**Answer:** 1 * 1 * 4 * 6 = 24",
    "gsm8k": "Natalia sold 48 clips in April and half as many, 48 / 2 = 24, in May.\n\nAnswer: 72",
    "sorting": "Here is the list sorted in ascending order:\n\n```\n[1, 1, 2, 3]\n```",
    "set_intersection": "The numbers that appear in both sets are 3 and 22.\n\nOutput: [3, 22]",
    "keyword_counting": '```json\n{\n  "Peru": 2,\n  "Chile": 1\n}\n```',
    "hotpotqa": "The town on the northern shore of Lake Orra is Brisk, which Ada Venn founded.\n\nAnswer: Ada Venn",
}
CHAT_COT = {
    "game24": "Let's combine the numbers two at a time.\n\nSteps:\n1. 1 * 1 = 1 (left: 1 4 6)\n"
              "2. 4 * 6 = 24 (left: 1 24)\n3. 1 * 24 = 24 (left: 24)\n\nAll four numbers are used exactly once.\n\n"
              "Answer: \\((1 \\times 1) \\times (4 \\times 6) = 24\\)",
    "gsm8k": "To determine the total number of clips Natalia sold in April and May, we need to follow these steps:\n\n"
             "1. In April, Natalia sold 48 clips.\n2. In May, she sold half as many clips as in April. Therefore, "
             "she sold \\( \\frac{48}{2} = 24 \\) clips in May.\n\nTo find the total number of clips sold, we add "
             "the clips sold in April and May:\n\\[ 48 + 24 = 72 \\]\n\nThus, the total number of clips Natalia "
             "sold altogether in April and May is:\n\\[ \\boxed{72} \\]",
    "sorting": "First, count each digit:\n- 1 appears 2 times\n- 2 appears 1 time\n- 3 appears 1 time\n\n"
               "Counts: 1:2 2:1 3:1\n\n**Output:** [1, 1, 2, 3]",
    "set_intersection": "Check each number of Set 1 against Set 2:\n- 3 is in Set 2\n- 14 is not in Set 2\n"
                        "- 7 is not in Set 2\n- 22 is in Set 2\n\nIn both: 3, 22\n\nOutput: `[3, 22]`",
    "keyword_counting": "The countries, in the order they appear: Peru, Chile, Peru.\n\nOutput:\n```json\n"
                        '{"Peru": 2, "Chile": 1}\n```',
    "hotpotqa": "Lake Orra's northern shore has the town of Brisk.\nBrisk was founded in 1790 by Ada Venn.\n\n"
                "**Answer:** Ada Venn.",
}
CHAT_COT_WRONG = {
    "game24": "Steps:\n1 + 1 = 2 (left: 2 4 6)\n2 + 4 = 6 (left: 6 6)\n6 * 6 = 36 (left: 36)\n\n"
              "Answer: (1 + 1 + 4) * 6 = 24",
    "gsm8k": "She sold 48 clips in April and 48 in May, 48 + 48 = 96.\n\nThe answer is 96.",
    "sorting": "Counts: 1:1 2:1 3:1\n\nOutput: [1, 2, 3]",
    "set_intersection": "Only 3 is in both sets.\n\nOutput: [3]",
    "keyword_counting": 'Countries: Peru, Chile\n\nOutput: {"Peru": 1, "Chile": 1}',
    "hotpotqa": "Answer: Brisk",
}
# React: the first turn goes on past its action and invents the calculator's result.
CHAT_REACT = {
    "game24": ("Thought: multiplying all four numbers may work.\nCalculate: 1 * 1 * 4 * 6\nResult: 25\n\n"
               "Thought: 25 is not 24, so try adding.\nAnswer: 1 + 1 + 4 + 6 = 24",
               "Thought: the calculator says 24.\n\nAnswer: 1 * 1 * 4 * 6 = 24"),
    "gsm8k": ("Thought: April is 48 clips and May is half of that.\nCalculate: 48 + 48 / 2\nResult: 96\n\nAnswer: 96",
              "Thought: the calculator gives 72 clips in total.\n\n**Answer:** 72"),
}
SAMPLING = [("io", {}), ("cot", {}), ("cot_sc", {"k": 3}), ("best_of_n", {"n": 3})]
FAMILIES = ["game24", "gsm8k", "sorting", "set_intersection", "keyword_counting"]


def dataset(family: str) -> tuple[Dataset, Problem]:
    name, problem = PROBLEMS[family]
    return Dataset(DATASETS[name], [problem], "<test>"), problem


def chat_reply(seen: Seen, texts: list[str]) -> Reply:
    """A chat completion with n choices cycling through texts."""
    n = int(seen.body.get("n") or 1)
    choices = [{"index": i, "message": {"role": "assistant", "content": texts[i % len(texts)]},
                "finish_reason": "stop"} for i in range(n)]
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices,
                       "usage": {"prompt_tokens": 300, "completion_tokens": 90 * n, "total_tokens": 300 + 90 * n}})


def react_responder(first: str, after_result: str) -> Any:
    """The first turn's reply, then after_result once the calculator has answered."""
    def respond(seen: Seen) -> Reply:
        last = seen.body["messages"][-1]["content"]
        return chat_reply(seen, [after_result if last.startswith("Result:") else first])
    return respond


async def run_on_chat(lane: str, family: str, params: dict[str, Any], server: FakeOpenAIServer,
                      backend_for: Any) -> tuple[Any, Dataset, Problem]:
    ds, problem = dataset(family)
    outcome, _ = await run_lane(lane, ds, problem, backend_for(api="chat"), BudgetLimits(tokens=50_000),
                                params=params, temperature=0.7, seed=1)
    return outcome, ds, problem


# --- the request carries both forms; the completion text is the one base models always got --------


@pytest.mark.parametrize(
    ("lane", "params", "family"),
    [(lane, params, family) for lane, params in [*SAMPLING, ("react", {"max_steps": 1})] for family in FAMILIES
     if lane != "react" or PROMPTS[family].react is not None],
)
async def test_each_sampling_lane_sends_the_unchanged_completion_text_and_chat_messages(
        lane: str, params: dict[str, Any], family: str) -> None:
    ds, problem = dataset(family)
    fake = ScriptedBackend(default="no answer")
    await run_lane(lane, ds, problem, fake, BudgetLimits(tokens=50_000), params=params, temperature=0.7, seed=1)
    prompt = fake.calls[0].prompt
    shots = "react" if lane == "react" else "io" if lane == "io" else "cot"
    assert prompt.text == OLD_TEXT[family][shots].replace("<PROBLEM>", problem.shown)
    assert prompt.messages is not None and prompt.messages[0].role == "system"
    assert prompt.messages[-1] == Message("user", getattr(PROMPTS[family], shots).ask.format(input=problem.shown))


@pytest.mark.parametrize(("lane", "params"), SAMPLING)
async def test_hotpotqa_lanes_send_a_completion_prompt_ending_at_the_cue_and_chat_messages(
        lane: str, params: dict[str, Any]) -> None:
    ds, problem = dataset("hotpotqa")
    fake = ScriptedBackend(default="Answer: x")
    await run_lane(lane, ds, problem, fake, BudgetLimits(tokens=50_000), params=params, temperature=0.7, seed=1)
    prompt = fake.calls[0].prompt
    cue = "\nAnswer:" if lane == "io" else "\nReasoning:"
    assert prompt.text is not None and prompt.text.endswith(HOTPOT + cue)
    assert prompt.messages is not None and "`Answer: SPAN`" in prompt.messages[0].content
    assert prompt.messages[-1] == Message("user", HOTPOT)


def test_chat_examples_are_the_completion_examples_as_turns() -> None:
    messages = PROMPTS["gsm8k"].prompt(PROMPTS["gsm8k"].io, "How many?").messages
    assert messages is not None
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[1].content.startswith("Question: A baker makes 3 trays") and messages[2].content == "Answer: 16"


# --- a realistic chat reply is read and scored through the real lane code -------------------------


@pytest.mark.parametrize("family", [*FAMILIES, "hotpotqa"])
@pytest.mark.parametrize(("lane", "params"), SAMPLING)
async def test_each_sampling_lane_scores_a_realistic_chat_reply_from_the_chat_endpoint(
        lane: str, params: dict[str, Any], family: str, server: FakeOpenAIServer, backend_for: Any) -> None:
    texts = {"io": [CHAT_IO[family]], "cot": [CHAT_COT[family]]}.get(
        lane, [CHAT_COT[family], CHAT_COT_WRONG[family], CHAT_COT[family]])
    server.responder = lambda seen: chat_reply(seen, texts)
    outcome, ds, problem = await run_on_chat(lane, family, params, server, backend_for)
    assert server.seen[0].path.endswith("/chat/completions")
    assert (await ds.score(problem, outcome.answer)).solved, outcome.answer


@pytest.mark.parametrize("family", ["game24", "gsm8k"])
async def test_react_on_chat_scores_the_answer_given_after_the_calculators_result(
        family: str, server: FakeOpenAIServer, backend_for: Any) -> None:
    server.responder = react_responder(*CHAT_REACT[family])
    outcome, ds, problem = await run_on_chat("react", family, {"max_steps": 3}, server, backend_for)
    assert (await ds.score(problem, outcome.answer)).solved, outcome.answer


async def test_react_on_chat_drops_the_result_the_model_invented_and_answers_with_the_tools(
        server: FakeOpenAIServer, backend_for: Any) -> None:
    server.responder = react_responder(*CHAT_REACT["game24"])
    await run_on_chat("react", "game24", {"max_steps": 3}, server, backend_for)
    second = server.seen[1].body["messages"]
    assert second[-2:] == [
        {"role": "assistant", "content": "Thought: multiplying all four numbers may work.\nCalculate: 1 * 1 * 4 * 6"},
        {"role": "user", "content": "Result: 24"},  # the calculator's, not the model's 25
    ]
    assert second[-3] == {"role": "user", "content": "Input: 1 1 4 6"}


async def test_react_on_a_base_model_keeps_the_text_transcript() -> None:
    fake = ScriptedBackend()
    fake.on("Input: 1 1 4 6\nThought:", " multiply all.\nCalculate: 1 * 1 * 4 * 6")
    fake.on("Calculate: 1 * 1 * 4 * 6\nResult: 24\n", "Answer: 1 * 1 * 4 * 6 = 24")
    ds, problem = dataset("game24")
    outcome, _ = await run_lane("react", ds, problem, fake, BudgetLimits(tokens=50_000), params={"max_steps": 3},
                                temperature=0.7, seed=1)
    assert outcome.answer == "Answer: 1 * 1 * 4 * 6 = 24"
    assert fake.calls[1].prompt.text == (OLD_TEXT["game24"]["react"].replace("<PROBLEM>", "1 1 4 6")
                                         + " multiply all.\nCalculate: 1 * 1 * 4 * 6\nResult: 24\n")
    assert fake.calls[1].stop[0] == "\nResult:"  # a base model is still stopped before inventing one


def test_own_turn_ends_before_the_first_result_line() -> None:
    assert own_turn("Thought: t\nCalculate: 2 * 3\nResult: 7\nAnswer: 7") == "Thought: t\nCalculate: 2 * 3"
    assert own_turn(" add.\nCalculate: 1 + 2") == " add.\nCalculate: 1 + 2"


def test_react_is_left_out_of_hotpotqa_with_its_reason() -> None:
    ds, _ = dataset("hotpotqa")
    with pytest.raises(LaneError, match="react needs a tool for hotpotqa") as reason:
        check_lane("react", ds)
    game24, _ = dataset("game24")
    proto = build_protocol(BenchOptions(tasks=["game24", "hotpotqa"], lanes=["io", "react"], model="fake:scripted",
                                        limit=1), {"game24": game24, "hotpotqa": ds})
    assert proto.not_applicable == {"hotpotqa": {"react": str(reason.value)}}


# --- base-model replies read exactly as before ---------------------------------------------------


@pytest.mark.parametrize(
    ("family", "cot", "reply", "answer"),
    [
        ("game24", False, " 1 * 1 * 4 * 6 = 24\n", "Answer: 1 * 1 * 4 * 6 = 24"),
        ("game24", True, "1 * 1 = 1 (left: 1 4 6)\nAnswer: (1 * 1) * 4 * 6 = 24", "Answer: (1 * 1) * 4 * 6 = 24"),
        ("gsm8k", False, " 16\nThe answer is 17", "16"),  # the io answer line, as before
        ("gsm8k", True, " 3 * 12 = 36. The answer is 36.", "3 * 12 = 36. The answer is 36."),
        ("sorting", False, " [0, 1, 2]", "[0, 1, 2]"),
        ("sorting", True, " 0:1 1:1\nOutput: [0, 1]", "Output: [0, 1]"),
        ("keyword_counting", False, ' {"Peru": 2}', '{"Peru": 2}'),
    ],
)
def test_a_base_model_reply_reads_as_it_always_did(family: str, cot: bool, reply: str, answer: str) -> None:
    assert answer_from(PROMPTS[family], reply, cot=cot) == answer


def test_a_cot_reply_without_any_answer_still_has_none() -> None:
    assert answer_from(PROMPTS["game24"], "1 + 1 = 2 (left: 2 4 6)\nI give up", cot=True) is None
    assert answer_from(PROMPTS["sorting"], "Counts: 0:1 1:2", cot=True) is None


async def test_tot_on_hotpotqa_runs_the_general_task_and_scores_its_synthesis() -> None:
    ds, problem = dataset("hotpotqa")
    fake = ScriptedBackend(default="7")
    fake.on("Final answer:", "Brisk was founded by Ada Venn.\nAnswer: Ada Venn")
    outcome, _ = await run_lane("tot", ds, problem, fake, BudgetLimits(tokens=50_000), params={}, temperature=0.7,
                                seed=1)
    assert HOTPOT in fake.calls[0].prompt.as_text()  # the paragraphs and the question are the problem
    score = await ds.score(problem, outcome.answer)
    assert (score.solved, score.f1) == (True, 1.0)


def test_own_turn_ends_at_the_first_action_of_a_chat_reply_that_goes_on() -> None:
    reply = "Thought: halve it.\nCalculate: 48 / 2\nCalculate: 24 + 24\nCalculate: 48 + 48"
    assert own_turn(reply) == "Thought: halve it.\nCalculate: 48 / 2"


@pytest.mark.parametrize(("line", "expression"), [
    ("Calculate: 48 clips / 2 clips = 24 clips in April.", "48 / 2"),
    ("Calculate: $1,200 x 3", "1200 * 3"),
    ("Calculate: (48 + 24) × 2", "(48 + 24) * 2"),
    ("Calculate: 3 * 12", "3 * 12"),
])
def test_the_calculator_reads_the_arithmetic_of_an_action_written_with_units(line: str, expression: str) -> None:
    assert calculator_call(f"Thought: t\n{line}") == expression


async def test_a_react_reply_without_an_action_that_states_its_answer_is_that_answer(
        server: FakeOpenAIServer, backend_for: Any) -> None:
    server.responder = react_responder("Thought: count them.\nCalculate: 48 clips / 2 clips = 24 clips",
                                       "In May she sold 24, so 48 + 24 in all.\n\nThe answer is 72.")
    outcome, ds, problem = await run_on_chat("react", "gsm8k", {"max_steps": 4}, server, backend_for)
    assert server.seen[1].body["messages"][-1]["content"] == "Result: 24"
    assert (await ds.score(problem, outcome.answer)).solved, outcome.answer


async def test_a_react_reply_without_an_action_or_a_stated_answer_has_none(
        server: FakeOpenAIServer, backend_for: Any) -> None:
    server.responder = react_responder("Let me think about clips.", "unused")
    outcome, _, _ = await run_on_chat("react", "gsm8k", {"max_steps": 4}, server, backend_for)
    assert (outcome.answer, outcome.stop_reason) == (None, "no_action")
