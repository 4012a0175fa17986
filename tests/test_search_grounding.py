"""Grounding inside the search: results move scores, stay on the nodes, can make goals, and steer revisions."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence

import pytest

from thoughtloom.grounding import GroundingPolicy, GroundingResult, Thought
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.engine import search
from thoughtloom.search.events import Event, ThoughtGrounded
from thoughtloom.tasks.base import Query, Task
from thoughtloom.views.mermaid import to_mermaid


class Guesses(Task[str]):
    """Thoughts are words; the value reply is a number; 'revise' prompts carry the feedback."""

    name = "guesses"

    def sample(self, problem: str, steps: Sequence[str]) -> Query:
        return Query(Prompt(text="guess after " + "/".join(steps)), max_tokens=8)

    def revise(self, problem: str, steps: Sequence[str], feedback: str) -> Query | None:
        return Query(Prompt(text=f"revise {steps[-1]} because {feedback}"), max_tokens=8)

    def parse_sample(self, problem: str, steps: Sequence[str], text: str) -> str | None:
        return text.strip() or None

    def exact_value(self, problem: str, steps: Sequence[str]) -> float | None:
        return 0.5

    def state_key(self, problem: str, steps: Sequence[str]) -> Hashable:
        return tuple(steps)

    def grounded_goal(self, problem: str, steps: Sequence[str], result: GroundingResult) -> bool:
        return result.verified is True


class WordGrounder:
    """Verifies thoughts in `good`, refutes the others; records what it saw."""

    name = "words"

    def __init__(self, good: set[str], *, raises: set[str] = frozenset()) -> None:
        self.good, self.raises = good, raises
        self.seen: list[Thought] = []

    def can_ground(self, thought: Thought) -> bool:
        return True

    async def ground(self, thought: Thought) -> GroundingResult:
        self.seen.append(thought)
        if thought.content in self.raises:
            raise RuntimeError("grounder bug")
        ok = thought.content in self.good
        return GroundingResult(self.name, True, ok, f"{thought.content} is {'good' if ok else 'bad'}", 1.0,
                               passed=int(ok), failed=int(not ok), score=1.0 if ok else 0.0)


def model(replies: dict[str, list[str]]) -> ScriptedBackend:
    def respond(request: GenerateRequest, index: int) -> str:
        text = request.prompt.as_text()
        for prefix, options in replies.items():
            if text.startswith(prefix):
                return options[index % len(options)]
        return "x"

    return ScriptedBackend(responder=respond)


CONFIG = SearchConfig(strategy="bfs", generation="sample", breadth=2, beam=2, max_depth=3)


async def test_a_verified_thought_becomes_the_goal_and_the_answer() -> None:
    grounder = WordGrounder({"right"})
    result = await search(Guesses(), "p", Gateway(model({"guess after": ["wrong", "right"]})), CONFIG, grounders=[grounder])
    assert result.termination_reason == "goal_reached"
    assert result.graph.node(result.goal_node).content == "right"
    assert result.score == 0.6  # prior 0.5 x boost 1.2


async def test_a_refuted_thought_is_penalized_and_keeps_its_evidence() -> None:
    result = await search(Guesses(), "p", Gateway(model({"guess after": ["wrong", "right"]})), CONFIG,
                          grounders=[WordGrounder({"right"})])
    wrong = next(n for n in result.graph if n.content == "wrong")
    assert wrong.score == pytest.approx(0.05)  # 0.5 x fail factor 0.1
    assert wrong.extra["grounding"]["verified"] is False
    assert wrong.extra["grounding"]["evidence"] == "wrong is bad"
    assert result.stats.grounding.grounded == 2 and result.stats.grounding.verified == 1 and result.stats.grounding.grounding_failed == 1


async def test_the_policy_sets_how_hard_a_failure_is_penalized() -> None:
    result = await search(Guesses(), "p", Gateway(model({"guess after": ["wrong", "right"]})), CONFIG,
                          grounders=[WordGrounder({"right"})], grounding_policy=GroundingPolicy(fail_factor=0.5))
    assert next(n for n in result.graph if n.content == "wrong").score == 0.25


async def test_a_thought_that_failed_grounding_is_expanded_with_a_revision_prompt_holding_the_evidence() -> None:
    fake = model({"guess after": ["wrong"], "revise wrong because wrong is bad": ["right"]})
    result = await search(Guesses(), "p", Gateway(fake), CONFIG, grounders=[WordGrounder({"right"})])
    assert any(r.prompt.as_text() == "revise wrong because wrong is bad" for r in fake.calls)
    assert result.graph.node(result.goal_node).content == "right"


async def test_grounders_see_the_problem_the_earlier_steps_and_the_thought() -> None:
    grounder = WordGrounder(set())
    fake = model({"guess after": ["a"], "revise a": ["b"], "revise b": ["c"]})
    await search(Guesses(), "the problem", Gateway(fake), CONFIG, grounders=[grounder])
    assert Thought("the problem", ("a",), "b", "hypothesis") in grounder.seen


async def test_a_grounder_that_raises_costs_that_thought_its_check_not_the_search() -> None:
    grounder = WordGrounder({"right"}, raises={"boom"})
    result = await search(Guesses(), "p", Gateway(model({"guess after": ["boom", "right"]})), CONFIG, grounders=[grounder])
    assert result.termination_reason == "goal_reached"
    boom = next(n for n in result.graph if n.content == "boom")
    assert "grounder failed: RuntimeError: grounder bug" in boom.extra["grounding"]["evidence"]
    assert boom.score == 0.5 and result.stats.grounding.grounder_errors == 1


async def test_grounding_is_reported_in_events_json_and_the_picture() -> None:
    events: list[Event] = []
    result = await search(Guesses(), "p", Gateway(model({"guess after": ["wrong", "right"]})), CONFIG,
                          grounders=[WordGrounder({"right"})], sinks=[events.append])
    grounded = [e for e in events if isinstance(e, ThoughtGrounded)]
    assert sorted((e.verified, e.before, round(e.after, 6)) for e in grounded) == [(False, 0.5, 0.05), (True, 0.5, 0.6)]
    data = json.loads(json.dumps(result.to_dict()))
    assert {g["verified"] for g in data["grounding"]} == {True, False}
    picture = to_mermaid(result.graph, [s.id for s in result.best_path])
    assert "✓ words 1/1 passed" in picture and "✗ words 0/1 passed" in picture


async def test_without_grounders_no_grounding_appears_in_results() -> None:
    result = await search(Guesses(), "p", Gateway(model({"guess after": ["wrong", "right"]})), CONFIG)
    assert "grounding" not in result.to_dict() and result.stats.grounding is None
