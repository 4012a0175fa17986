"""Every task speaks to base models in completion text and to instruct models in chat turns.

Through a scripted OpenAI-compatible server on 127.0.0.1: a `#completions` model gets few-shot
text and the task's stop strings; a chat model gets messages, no stop strings, and answers as an
instruct model does (reasoning first, the result at the end, over several paragraphs).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.api import asolve
from thoughtloom.tasks.registry import TASKS, get_task

# An instruct model's game24 steps for "4 5 6 10", in the chat form's turn structure.
CHAT_STEPS = {
    "4 5 6 10": "Possible next steps:\n10 - 4 = 6 (left: 5 6 6)\n4 + 5 = 9 (left: 6 9 10)",
    "5 6 6": "Possible next steps:\n5 * 6 = 30 (left: 6 30)",
    "6 30": "Possible next steps:\n30 - 6 = 24 (left: 24)",
}


def body(seen: Seen, text: str) -> Reply:
    n = int(seen.body.get("n") or 1)
    chat = seen.path.endswith("/chat/completions")
    choice = (lambda i: {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}) \
        if chat else (lambda i: {"index": i, "text": text, "finish_reason": "stop"})
    return Reply(200, {"id": "x", "object": "x", "created": 0, "model": "m", "choices": [choice(i) for i in range(n)],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 10 * n, "total_tokens": 50 + 10 * n}})


def game24_reply(seen: Seen) -> Reply:
    if "messages" in seen.body:
        assert "stop" not in seen.body  # chat replies end at the end of turn
        asked = seen.body["messages"][-1]["content"]
        if asked.startswith("Input: "):
            return body(seen, CHAT_STEPS.get(asked.removeprefix("Input: "), "Possible next steps:\n1 + 1 = 2 (left: 2)"))
        # A value turn: reasoning lines, then the verdict word last.
        return body(seen, "Let me try a few.\n6 * 5 = 30, which is likely too big at first sight.\n\nsure")
    assert seen.body["stop"]  # the completion form ends at the few-shot pattern's boundary
    prompt = seen.body["prompt"]
    if prompt.startswith("Evaluate if"):
        return body(seen, "sure")
    numbers = re.findall(r"Input: ([\d ]+)\nPossible", prompt)[-1]
    return body(seen, CHAT_STEPS.get(numbers, "Possible next steps:\n1 + 1 = 2 (left: 2)").split("\n", 1)[1])


def general_reply(seen: Seen) -> Reply:
    if "messages" in seen.body:
        assert "stop" not in seen.body
        system = seen.body["messages"][0]["content"]
        if "evaluator" in system:
            return body(seen, "The step halves 48 correctly and moves toward the answer.\n\n**Score: 8/10**")
        if "synthesizer" in system:
            return body(seen, "April: 48 clips. May: 48 / 2 = 24 clips.\n\nThe answer is \\boxed{72}.")
        return body(seen, "Step 1: In May she sold half of 48.\n\nThat is 48 / 2 = 24 clips.")
    prompt = seen.body["prompt"]
    if prompt.endswith("0 to 10:"):
        return body(seen, " 8")
    if prompt.endswith("Final answer:"):
        return body(seen, " 72")
    return body(seen, " In May she sold 48 / 2 = 24 clips.")


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_game24_reaches_24_through_either_prompt_form(server: FakeOpenAIServer, endpoint: str) -> None:
    server.responder = game24_reply
    result = await asolve("4 5 6 10", task="game24", model=f"openai-compatible:{server.url}@m#{endpoint}",
                          seed=1, controller=False)
    assert result.solved is True, result.termination_reason
    assert all(("messages" in s.body) == (endpoint == "chat") for s in server.seen)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_the_general_task_answers_through_either_prompt_form(server: FakeOpenAIServer, endpoint: str) -> None:
    server.responder = general_reply
    result = await asolve("Natalia sold 48 clips in April and half as many in May. How many in all?", task="general",
                          model=f"openai-compatible:{server.url}@m#{endpoint}", seed=1, controller=False)
    assert result.answer is not None and "72" in result.answer
    assert result.score == pytest.approx(0.8)


def _queries(task_name: str) -> list[Any]:
    """One of each prompt a task builds for a representative problem (those it supports)."""
    problems = {"game24": "4 5 6 10", "general": "Why is the sky blue?", "humaneval": "HumanEval/0",
                "sorting": "[3, 1, 2, 0, 5, 4, 9, 8]", "set_intersection": "[1, 2, 3] [2, 3, 4]",
                "keyword_counting": "Anna went from Spain to Peru."}
    task = get_task(task_name)
    problem = task.parse_problem(problems[task_name])
    out = []
    for build in (lambda: task.propose(problem, [], 3), lambda: task.sample(problem, []),
                  lambda: task.value(problem, ["a step"] if task_name != "game24" else []),
                  lambda: task.synthesize(problem, ["a step"])):
        try:
            query = build()
        except Exception:  # noqa: BLE001 - an operation the task does not support
            continue
        if query is not None:
            out.append(query)
    hooks = task.recursion(problem)
    if hooks is not None and hasattr(hooks, "root_goal"):
        out.append(hooks.solve_query(hooks.root_goal(), 0, None))
    return out


@pytest.mark.parametrize("task_name", ["game24", "general", "humaneval", "sorting", "set_intersection",
                                       "keyword_counting"])
def test_every_prompt_a_task_builds_has_both_forms(task_name: str) -> None:
    assert task_name in TASKS
    queries = _queries(task_name)
    assert queries
    for q in queries:
        assert q.prompt.text and q.prompt.messages, q
        assert q.prompt.messages[-1].role == "user"
