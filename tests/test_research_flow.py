"""Research Flow: the state machine, branching, pruning, merging, the insight stream, stopping, storage and replay."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from thoughtloom.api import areplay, research
from thoughtloom.graph import EdgeKind, NodeKind, NodeStatus
from thoughtloom.grounding.citations import CitationChecker, CitationStatus
from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.run.gateway import build_gateway
from thoughtloom.run.spec import SpecError
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.context import SearchContext
from thoughtloom.search.events import FlowTransitioned, NodePruned
from thoughtloom.search.research import (
    DIRECTIONS,
    FlowMachine,
    FlowState,
    Hypothesis,
    IllegalFlowTransition,
    ResearchConfig,
    ResearchConfigError,
    ResearchFlow,
    ResearchSetup,
)
from thoughtloom.search.research.evidence import line_stating, narrowed_citations
from thoughtloom.search.research.merge import Candidate, best_first, weighted_vote
from thoughtloom.search.research.promise import evidence_confidence, information_gain, promise, track_record
from thoughtloom.search.research.records import Evidence, HypothesisStatus
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.research import ResearchTask, parse_judgements, parse_proposals, parse_synthesis
from thoughtloom.tools import Toolbox

QUESTION = "Who built the Argo?"
ROOT = "1. Argus - the shipwright of the legend.\n2. Jason - he led the crew.\n3. Athena - she helped."
#: What the judge says of each hypothesis, by its first word.
JUDGED = {
    "Argus": "1: SUPPORTS 0.9 it names Argus as the builder",
    "Jason": "1: CONTRADICTS 0.9 Jason only led the crew",
    "Athena": "1: SUPPORTS 0.3 she helped\n2: CONTRADICTS 0.3 she did not build it alone",
}
SYNTH = "ANSWER: Argus\nWHY: the passage names Argus as the builder [docs:argo.md:1-2]."


def written(folder: Path, files: dict[str, str]) -> str:
    """A knowledge folder holding these files (name -> text)."""
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


@pytest.fixture
def docs(tmp_path: Path) -> str:
    return written(tmp_path / "docs", {"argo.md": "# The Argo\nThe Argo was built by Argus, with the help of Athena.\n",
                                       "jason.md": "# Jason\nJason led the Argonauts; he did not build the ship.\n",
                                       "athena.md": "# Athena\nAthena helped Argus build the Argo.\n"})


def world(root: str = ROOT, judged: dict[str, str] | None = None, children: str | None = None,
          synth: str = SYNTH, claim: str = "SUPPORTS 0.8 a fact I know") -> ScriptedBackend:
    """A scripted model answering the flow's prompts by what they ask."""
    judged = JUDGED if judged is None else judged
    counter = iter(range(1, 1000))

    def reply(request: GenerateRequest, _: int) -> str:
        text = request.prompt.as_messages()[-1].content
        if text.rstrip().endswith("Hypotheses (" + text.rstrip().split("Hypotheses (")[-1]) and "Current" not in text:
            return root
        if "Alternative hypotheses" in text:
            n = next(counter)
            return children or f"1. Alt{n}a - another builder.\n2. Alt{n}b - yet another."
        hypothesis = re.search(r"Hypothesis: (\w+)", text)
        if "Passages:" in text and hypothesis is not None:
            return judged.get(hypothesis.group(1), "1: UNRELATED 0 nothing")
        if hypothesis is not None:
            return claim
        if "Hypotheses:" in text:
            return synth
        raise AssertionError(f"unexpected prompt: {text[-200:]}")

    return ScriptedBackend(responder=reply)


def run(question: str = QUESTION, *, model: ScriptedBackend, knowledge: str | None = None, **settings: Any) -> Any:
    async def go() -> Any:
        stream = research(question, knowledge=knowledge, model=model, controller=False, **settings)
        insights = [i async for i in stream]
        result = await stream.result()
        return stream, insights, result

    return asyncio.run(go())


def moves(result: Any) -> list[tuple[str, str]]:
    return [(source, direction) for source, direction, _ in result.transitions]


# --- the state machine ------------------------------------------------------------------------------


def test_each_state_has_exactly_the_directions_seed_004_lists() -> None:
    assert {s: set(d) for s, d in DIRECTIONS.items()} == {
        FlowState.DORMANT: {"start", "configure"},
        FlowState.STREAMING: {"explore", "branch", "evaluate", "stop"},
        FlowState.BRANCHING: {"expand", "prune", "stream"},
        FlowState.CONVERGING: {"merge", "synthesize", "stream"},
        FlowState.COLLAPSED: {"reset", "harvest"},
    }


def test_a_direction_the_state_does_not_have_raises_and_leaves_the_state() -> None:
    machine = FlowMachine()
    with pytest.raises(IllegalFlowTransition, match="dormant research flow cannot 'merge'"):
        machine.go("merge")
    assert machine.state is FlowState.DORMANT and machine.history == []


def test_reset_returns_a_collapsed_flow_to_dormant() -> None:
    machine = FlowMachine(FlowState.COLLAPSED)
    assert machine.go("reset") is FlowState.DORMANT


def test_a_run_streams_every_transition_as_an_event_and_stores_them(docs: str) -> None:
    seen: list[FlowTransitioned] = []
    stream, _, result = run(model=world(), knowledge=docs, sinks=[lambda e: seen.append(e) if isinstance(
        e, FlowTransitioned) else None])
    assert [[e.source, e.direction, e.target] for e in seen] == result.transitions
    assert stream.search.graph.node(0).extra["research"]["transitions"] == result.transitions
    assert result.transitions[:2] == [["dormant", "configure", "dormant"], ["dormant", "start", "streaming"]]
    assert result.transitions[-1] == ["collapsed", "harvest", "collapsed"] and result.state == "collapsed"


def test_a_flow_that_finds_no_hypothesis_stops_without_an_answer(docs: str) -> None:
    _, _, result = run(model=world(root="I cannot say."), knowledge=docs)
    assert ("streaming", "stop") in moves(result) and ("converging", "synthesize") not in moves(result)
    assert result.answer is None and result.stopped_by == "frontier_exhausted"


def test_a_merge_that_leaves_doubt_streams_on(docs: str) -> None:
    judged = {"Argus": "1: SUPPORTS 0.5 maybe", "Jason": "1: SUPPORTS 0.4 maybe", "Athena": "1: SUPPORTS 0.4 maybe"}
    _, _, result = run(model=world(judged=judged), knowledge=docs, merge_threshold=3, merge_strategy="weighted_vote",
                       exploration_budget=4)
    assert ("converging", "merge") in moves(result) and ("converging", "stream") in moves(result)


def test_the_runs_above_take_every_direction_of_every_state_but_reset(docs: str) -> None:
    taken: set[tuple[str, str]] = set()
    for model, settings in [
        (world(), {}),
        (world(root="I cannot say."), {}),
        (world(judged={"Argus": "1: SUPPORTS 0.5 m", "Jason": "1: SUPPORTS 0.4 m", "Athena": "1: SUPPORTS 0.4 m"}),
         {"merge_threshold": 3, "exploration_budget": 4}),
    ]:
        taken |= set(moves(run(model=model, knowledge=docs, **settings)[2]))
    every = {(s.value, d) for s, ds in DIRECTIONS.items() for d in ds}
    assert every - taken == {("collapsed", "reset")}


# --- hypotheses, evidence and confidence -----------------------------------------------------------


def test_evidence_from_the_documents_moves_each_hypothesis_its_way(docs: str) -> None:
    stream, insights, result = run(model=world(), knowledge=docs, confidence_threshold=0.99)
    by_answer = {h.answer: h for h in result.tree.values() if h.depth == 1}
    assert by_answer["Argus"].confidence > 0.8 > 0.5 > 0.2 > by_answer["Jason"].confidence
    supports = by_answer["Argus"].evidence[0]
    assert supports.supports and supports.source.startswith("docs:") and "Argus" in supports.content
    graph = stream.search.graph
    assert graph.edge(by_answer["Argus"].id, supports.node_id).kind is EdgeKind.SUPPORTS
    against = by_answer["Jason"].evidence[0]
    assert graph.edge(by_answer["Jason"].id, against.node_id).kind is EdgeKind.CONTRADICTION
    assert graph.node(against.node_id).kind is NodeKind.EVIDENCE
    assert {"discovery", "evidence", "contradiction", "synthesis"} <= {i.type for i in insights}


def test_without_documents_the_models_own_claim_is_evidence_marked_as_such_and_weighs_half() -> None:
    _, _, result = run(model=world(claim="SUPPORTS 0.8 Argus built it, I recall"), exploration_budget=1)
    explored = [h for h in result.tree.values() if h.explored and h.depth == 1]
    evidence = explored[0].evidence[0]
    assert evidence.source == "model" and not evidence.cited and evidence.weight == pytest.approx(0.4)
    assert explored[0].confidence == pytest.approx(evidence_confidence(0.5, [evidence]))


def test_a_claimed_sum_is_checked_exactly_with_the_calculator(docs: str) -> None:
    root = "1. 12 ships - 3 x 4 = 12 ships were built.\n2. 13 ships - 3 x 4 = 13 ships were built."
    _, _, result = run("How many ships were built?", model=world(root=root, judged={}), knowledge=docs,
                       exploration_budget=2)
    calc = {h.answer: [e for e in h.evidence if e.source == "tool:calc"][0] for h in result.tree.values() if h.depth}
    assert calc["12 ships"].supports and not calc["13 ships"].supports
    assert "is 12, not 13" in calc["13 ships"].content


def test_confidence_moves_by_evidence_weight_in_log_odds() -> None:
    doc = Evidence("x", True, 0.9, "docs:a.md:1")
    assert evidence_confidence(0.5, []) == pytest.approx(0.5)
    assert evidence_confidence(0.5, [doc]) > evidence_confidence(0.5, [Evidence("x", True, 0.9, "model")]) > 0.5
    assert evidence_confidence(0.5, [doc, Evidence("y", False, 0.9, "docs:b.md:1")]) == pytest.approx(0.5)


def test_promise_is_prior_times_information_gain_times_track_record_over_cost() -> None:
    parent = Hypothesis(1, "p", None, 1, 0.8, 0.0, evidence=[Evidence("x", True, 0.9, "docs:a.md:1")])
    child = Hypothesis(2, "c", 1, 2, 0.5, 0.0)
    value, factors = promise(child, parent, depth_limit=4)
    assert factors == pytest.approx({"prior": 0.5, "info_gain": 1.0, "track_record": 2 * 1.9 / 2.9, "cost": 1.5})
    assert value == pytest.approx(0.5 * 1.0 * (2 * 1.9 / 2.9) / 1.5)
    assert track_record(None) == 1.0 and information_gain(0.98) < information_gain(0.7) < information_gain(0.5)


def test_a_yes_no_question_starts_from_yes_and_no_without_asking_the_model(docs: str) -> None:
    model = world()
    _, insights, result = run("Was the Argo built by Argus?", model=model, knowledge=docs, exploration_budget=2)
    assert [h.answer for h in result.tree.values() if h.depth == 1] == ["Yes", "No"]
    assert not any("Hypotheses (" in c.prompt.as_text() for c in model.calls)


def test_a_passage_that_does_not_name_the_answer_cannot_support_it(docs: str) -> None:
    judged = {"Jason": "1: SUPPORTS 0.9 yes\n2: SUPPORTS 0.9 yes\n3: SUPPORTS 0.9 yes"}
    _, _, result = run(model=world(judged=judged), knowledge=docs, exploration_budget=3, confidence_threshold=0.99)
    jason = next(h for h in result.tree.values() if h.answer == "Jason")
    assert jason.evidence and all("Jason" in e.content for e in jason.evidence)


# --- branching ----------------------------------------------------------------------------------------


def flow_with(config: ResearchConfig, *hypotheses: Hypothesis) -> ResearchFlow:
    ctx = SearchContext(ResearchTask(), QUESTION, build_gateway(ScriptedBackend(default="")),
                        SearchConfig(strategy="research"))
    flow = ResearchFlow(ctx, ResearchSetup(config), Toolbox())
    for h in hypotheses:
        flow.tree[h.id] = h
    return flow


def explored(id: int, depth: int, confidence: float, promise: float = 0.3, evidence: tuple[Evidence, ...] = ()) -> Hypothesis:
    from datetime import datetime

    return Hypothesis(id, f"h{id}", 0, depth, confidence, promise, evidence=list(evidence),
                      explored_at=datetime.now())


AGAINST = Evidence("no", False, 0.4, "docs:a.md:1")
SHALLOW_SURE, SHALLOW_UNSURE, SHALLOW_CONFLICT = explored(1, 1, 0.9), explored(2, 1, 0.2, 0.1), \
    explored(3, 1, 0.5, 0.4, (AGAINST,))
DEEP_UNSURE, DEEP_PROMISING = explored(4, 2, 0.25, 0.2), explored(5, 2, 0.1, 0.05)


@pytest.mark.parametrize(("strategy", "branched"), [
    ("uncertainty", [2, 4, 5]),
    ("contradiction", [3]),
    ("depth_first", [4]),
    ("breadth_first", [2]),
    ("best_first", [4]),
])
def test_each_branching_strategy_picks_its_hypotheses(strategy: str, branched: list[int]) -> None:
    flow = flow_with(ResearchConfig(branching_strategy=strategy), SHALLOW_SURE, SHALLOW_UNSURE, SHALLOW_CONFLICT,
                     DEEP_UNSURE, DEEP_PROMISING)
    assert sorted(h.id for h in flow._to_branch()) == branched


def test_nothing_branches_at_the_depth_limit() -> None:
    flow = flow_with(ResearchConfig(depth_limit=2), DEEP_UNSURE)
    assert flow._to_branch() == []


def test_a_doubtful_hypothesis_is_branched_into_alternatives_below_it(docs: str) -> None:
    stream, _, result = run(model=world(), knowledge=docs, confidence_threshold=0.99, exploration_budget=4)
    jason = next(h for h in result.tree.values() if h.answer == "Jason")
    assert jason.status is HypothesisStatus.EXPANDED
    children = [h for h in result.tree.values() if h.parent_id == jason.id]
    assert [h.answer for h in children] == ["Alt1a", "Alt1b"] and all(h.depth == 2 for h in children)
    assert result.statistics.max_depth_reached == 2 and result.statistics.branch_factor == pytest.approx(2.5)


# --- the second hop of a bridge question ------------------------------------------------------------

BRIDGE_QUESTION = "Where was the director of Harbour Lights born?"


@pytest.fixture
def bridge_docs(tmp_path: Path) -> str:
    """A film's page naming its director, the director's page, and pages of the film's that outrank the director's
    for the question's own words."""
    folder = tmp_path / "bridge"
    folder.mkdir()
    (folder / "harbour.md").write_text("# Harbour Lights\nHarbour Lights was directed by Jane Doe.\n")
    (folder / "jane.md").write_text("# Jane Doe\nJane Doe was born in Leeds.\n")
    (folder / "score.md").write_text("# Harbour Lights (soundtrack)\nThe Harbour Lights soundtrack was born of "
                                     "a director's cut of Harbour Lights.\n")
    return str(folder)


def bridge_world(prompts: list[str], hop: str = "NAME: Jane Doe") -> ScriptedBackend:
    """A scripted model that answers from what its prompts show: Leeds once a passage says so, else the director;
    asked who the director is, it replies `hop`."""

    def reply(request: GenerateRequest, _: int) -> str:
        text = request.prompt.as_messages()[-1].content
        prompts.append(text)
        if "Who or what is the director of Harbour Lights?" in text:
            return hop
        if "Hypotheses (" in text:
            return "1. Leeds - passage says she was born there." if "born in Leeds" in text else "1. Jane Doe - [1]."
        if "Passages:" in text:
            return "1: SUPPORTS 0.9 it says so"
        return "ANSWER: Leeds\nWHY: Jane Doe was born in Leeds [docs:jane.md:2]." if "Leeds" in text else \
            "ANSWER: Jane Doe\nWHY: she directed it."

    return ScriptedBackend(responder=reply)


def test_a_bridge_question_searches_again_for_the_entity_its_first_passages_name(bridge_docs: str) -> None:
    prompts: list[str] = []
    stream, _, result = run(BRIDGE_QUESTION, model=bridge_world(prompts), knowledge=bridge_docs, passages=1)
    root = stream.search.graph.node(0)
    queries = [c["args"]["query"] for c in root.extra["tool_calls"]]
    assert queries == [BRIDGE_QUESTION, "Jane Doe born"]
    assert root.extra["hops"] == [{"name": "Jane Doe", "how": "named by the model"}]
    # The naming call reads the first passages; the brancher then reads the second hop's passage.
    assert "Harbour Lights was directed by Jane Doe" in prompts[0] and "Jane Doe was born" not in prompts[0]
    assert "Jane Doe was born in Leeds" in next(p for p in prompts if "Hypotheses (" in p)
    assert result.answer.answer == "Leeds"
    assert any(c.startswith("docs:jane.md") for c in result.answer.citations)


@pytest.mark.parametrize("hop", ["NAME: none", "NAME: Max Power", "She did."])
def test_a_research_hop_reply_naming_no_entity_of_the_passages_falls_back_to_the_name_they_write(
        bridge_docs: str, hop: str) -> None:
    stream, _, result = run(BRIDGE_QUESTION, model=bridge_world([], hop), knowledge=bridge_docs, passages=1)
    root = stream.search.graph.node(0)
    assert [c["args"]["query"] for c in root.extra["tool_calls"]] == [BRIDGE_QUESTION, "Jane Doe born"]
    (record,) = root.extra["hops"]
    assert record["name"] == "Jane Doe" and record["how"].startswith("found in the passages")
    assert result.answer.answer == "Leeds"


def test_a_question_with_no_bridge_makes_no_extra_search(bridge_docs: str) -> None:
    stream, _, _ = run("Who directed Harbour Lights?", model=bridge_world([]), knowledge=bridge_docs, passages=1)
    assert len(stream.search.graph.node(0).extra["tool_calls"]) == 1


def test_bridge_hops_zero_turns_the_second_hop_off(bridge_docs: str) -> None:
    stream, _, _ = run(BRIDGE_QUESTION, model=bridge_world([]), knowledge=bridge_docs, passages=1, bridge_hops=0)
    assert len(stream.search.graph.node(0).extra["tool_calls"]) == 1


def test_negative_bridge_hops_are_refused() -> None:
    with pytest.raises(ResearchConfigError, match="bridge_hops must be >= 0"):
        ResearchConfig(bridge_hops=-1)


def test_a_research_run_with_a_second_hop_replays_exactly(bridge_docs: str, tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    stream, _, _ = run(BRIDGE_QUESTION, model=bridge_world([]), knowledge=bridge_docs, passages=1, store=store)
    run_id = stream.search.run_id
    with SQLiteStore(store) as opened:
        _, verdict = asyncio.run(areplay(opened, run_id))
    assert verdict.identical and verdict.model_calls == 0


# --- pruning ----------------------------------------------------------------------------------------


def test_strong_contradicting_evidence_prunes() -> None:
    h = explored(1, 1, 0.1, 0.5, (Evidence("no", False, 0.9, "docs:a.md:1"),))
    assert flow_with(ResearchConfig(), h)._prune_reason(h, [h]).startswith("contradiction")


def test_the_models_own_strong_claim_against_does_not_prune_by_contradiction() -> None:
    h = explored(1, 1, 0.3, 0.5, (Evidence("no", False, 1.0, "model"),))
    assert flow_with(ResearchConfig(), h)._prune_reason(h, [h]) is None


def test_low_promise_prunes() -> None:
    h = explored(1, 1, 0.5, 0.1)
    assert flow_with(ResearchConfig(pruning_threshold=0.2), h)._prune_reason(h, [h]).startswith("low_promise")


def test_a_hypothesis_saying_the_same_as_a_more_confident_one_is_superseded() -> None:
    weak, strong = explored(1, 1, 0.5, 0.5), explored(2, 1, 0.7, 0.5)
    weak.answer = strong.answer = "Argus"
    flow = flow_with(ResearchConfig(), weak, strong)
    assert flow._prune_reason(weak, [weak, strong]).startswith("superseded: by hypothesis 2")
    assert flow._prune_reason(strong, [weak, strong]) is None


def test_pruning_spares_hypotheses_above_prune_after_depth(docs: str) -> None:
    # depth_limit 1: a refuted hypothesis cannot branch into alternatives, so only pruning can rule it out.
    early = run(model=world(), knowledge=docs, confidence_threshold=0.99, depth_limit=1)[2]
    late = run(model=world(), knowledge=docs, confidence_threshold=0.99, depth_limit=1, prune_after_depth=2)[2]
    jason = [h for h in early.tree.values() if h.answer == "Jason"][0]
    assert jason.status is HypothesisStatus.PRUNED and jason.pruned_reason.startswith("contradiction")
    assert all(h.status is not HypothesisStatus.PRUNED for h in late.tree.values() if h.depth == 1)


def test_a_pruned_hypothesis_is_a_pruned_node_and_an_event(docs: str) -> None:
    pruned: list[NodePruned] = []
    stream, _, result = run(model=world(), knowledge=docs, confidence_threshold=0.99, depth_limit=1,
                            sinks=[lambda e: pruned.append(e) if isinstance(e, NodePruned) else None])
    jason = [h for h in result.tree.values() if h.answer == "Jason"][0]
    assert stream.search.graph.node(jason.id).status is NodeStatus.PRUNED
    assert [e.node_id for e in pruned] == [jason.id] and result.statistics.pruned_by == {"contradiction": 1}


# --- merging ----------------------------------------------------------------------------------------


def candidate(id: int, answer: str, confidence: float) -> Candidate:
    return Candidate(f"H{id}", id, f"{answer} - because", answer, confidence, (id,),
                     (Evidence("e", True, 0.8, f"docs:{answer}.md:1"),))


def test_best_first_takes_the_most_confident() -> None:
    merged = best_first([candidate(1, "Argus", 0.6), candidate(2, "Jason", 0.8)])
    assert (merged.answer, merged.confidence, merged.sources, merged.method) == ("Jason", 0.8, (2,), "best_first")


def test_weighted_vote_pools_confidence_behind_the_same_answer() -> None:
    merged = weighted_vote([candidate(1, "Argus", 0.5), candidate(2, "the argus", 0.5), candidate(3, "Jason", 0.8)])
    assert merged.answer == "Argus" and merged.confidence == pytest.approx(1.0 / 3)
    assert merged.sources == (1, 2, 3) and merged.citations[:2] == ("docs:Argus.md:1", "docs:the argus.md:1")


def test_synthesis_takes_the_models_answer_with_the_evidences_confidence(docs: str) -> None:
    _, _, result = run(model=world(), knowledge=docs, confidence_threshold=0.99, exploration_budget=3)
    answer = result.answer
    argus = next(h for h in result.tree.values() if h.answer == "Argus")
    assert answer.method == "synthesis" and answer.answer == "Argus" and answer.final
    assert answer.confidence == pytest.approx(argus.confidence)
    assert argus.id in answer.sources and answer.citations[0] == "docs:argo.md:2"  # the line naming Argus


def test_a_synthesis_naming_no_tested_hypothesis_gets_the_lowest_confidence(docs: str) -> None:
    _, _, result = run(model=world(synth="ANSWER: Poseidon\nWHY: a guess."), knowledge=docs,
                       confidence_threshold=0.99, exploration_budget=3)
    live = [h.confidence for h in result.tree.values() if h.depth == 1 and h.status is HypothesisStatus.EXPLORING]
    assert result.answer.answer == "Poseidon" and result.answer.confidence == pytest.approx(min(live))


def test_a_synthesis_naming_the_questions_own_subject_answers_with_the_hypothesis_the_rules_accept(docs: str) -> None:
    _, _, result = run(model=world(synth="ANSWER: The Argo\nWHY: the passage is about the Argo [docs:argo.md:1-2]."),
                       knowledge=docs, confidence_threshold=0.99, exploration_budget=3)
    assert result.answer.answer == "Argus"


def test_the_final_synthesis_answers_with_the_span_alone(docs: str) -> None:
    _, _, result = run(model=world(synth='ANSWER: **Final answer:** "Argus." He built it.\nWHY: [docs:argo.md:1-2].'),
                       knowledge=docs, confidence_threshold=0.99, exploration_budget=3)
    assert result.answer.answer == "Argus"


YEAR_QUESTION = "In what year was the ship Argus built launched?"
#: The brancher answers a year question with a title: what research did on HotpotQA (issue 33).
TITLE_ROOT = "1. The Argo - the ship of the legend."
TITLE_SYNTH = "ANSWER: The Argo\nWHY: the passage is about the Argo [docs:argo.md:1-2]."


@pytest.fixture
def dated(tmp_path: Path) -> str:
    return written(tmp_path / "dated", {"argo.md": "# The Argo\nThe Argo was the ship Argus built. It was launched "
                                                   "in 1299.\n",
                                        "jason.md": "# Jason\nJason was born in 1280 and led the Argonauts.\n"})


def test_a_year_question_whose_brancher_gives_no_year_tests_the_year_the_passages_give(dated: str) -> None:
    _, _, result = run(YEAR_QUESTION, model=world(root=TITLE_ROOT, synth=TITLE_SYNTH), knowledge=dated,
                       confidence_threshold=0.99, exploration_budget=3)
    first = sorted((h for h in result.tree.values() if h.depth == 1), key=lambda h: h.id)
    assert [h.answer for h in first] == ["1299", "The Argo"]
    assert first[1].prior == pytest.approx(0.25)  # the title's confidence halved: it is no year


def test_a_year_question_answered_with_a_title_answers_with_the_year_and_cites_its_passage(dated: str) -> None:
    synth = "ANSWER: The Argo\nWHY: it is the ship of the legend."  # cites nothing
    _, _, result = run(YEAR_QUESTION, model=world(root=TITLE_ROOT, synth=synth, judged={}), knowledge=dated,
                       confidence_threshold=0.99, exploration_budget=3)
    assert result.answer.answer == "1299"
    assert any(ref.startswith("docs:argo.md") for ref in result.answer.citations) and result.answer.flagged == ()


def test_an_answer_the_synthesis_gives_uncited_gets_no_citation_added(docs: str) -> None:
    _, _, result = run(model=world(synth="ANSWER: Argus\nWHY: it is the builder.", judged={}), knowledge=docs,
                       confidence_threshold=0.99, exploration_budget=3)
    assert (result.answer.answer, result.answer.citations) == ("Argus", ())


def final_checks(synth: str, docs: str) -> Any:
    """The final answer of a run whose synthesizer replies `synth`, and its citation checks by the ref as written."""
    _, _, result = run(model=world(synth=synth), knowledge=docs, confidence_threshold=0.99, exploration_budget=3)
    return result.answer, {c.ref: c for c in result.answer.checks}


def test_a_final_answer_citing_a_passage_no_search_read_is_flagged_and_not_kept(docs: str) -> None:
    answer, checks = final_checks("ANSWER: Argus\nWHY: the log says so [docs:ghost.md:3].", docs)
    assert checks["docs:ghost.md:3"].status == "no_source" and not checks["docs:ghost.md:3"].valid
    assert "docs:ghost.md:3" not in answer.citations and answer.flagged[0].ref == "docs:ghost.md:3"
    shown = {c["ref"]: c for c in answer.to_dict()["citation_checks"]}
    assert (shown["docs:ghost.md:3"]["valid"], shown["docs:ghost.md:3"]["status"]) == (False, "no_source")


def test_a_final_answer_citing_a_passage_that_does_not_name_it_is_flagged(docs: str) -> None:
    answer, checks = final_checks("ANSWER: Argus\nWHY: Jason's page says so [docs:jason.md:1-2].", docs)
    jason = checks["docs:jason.md:1-2"]
    assert jason.passage is not None and "Jason led the Argonauts" in jason.passage.text  # a real passage, read
    assert (jason.status, jason.valid) == ("unrelated", False) and "does not name Argus" in jason.reason
    assert "docs:jason.md:1-2" not in answer.citations


def test_a_final_answer_citing_a_passage_that_names_it_keeps_the_citation_verified(docs: str) -> None:
    answer, checks = final_checks(SYNTH, docs)  # cites argo.md:1-2, the heading and the line naming Argus
    assert checks["docs:argo.md:2"].valid and answer.citations[0] == "docs:argo.md:2"
    assert answer.flagged == () and answer.to_dict()["citation_checks"][0]["valid"] is True


#: A knowledge base whose paragraphs are windows of several lines: one line says who built the ship, and another
#: document names each word of the answer without saying it.
SHIPWRIGHT = {"argo.md": "# The Argo\nThe Argo was a ship of the legend.\nThe Argo was built by Argus of Thespiae.\n"
                         "Athena helped with the sails.\n",
              "crew.md": "# The crew\nArgus came from Thespiae, a town of Boeotia.\nJason led the crew.\n"}
SHIPWRIGHT_ROOT = "1. Argus of Thespiae - the shipwright of the legend.\n2. Jason - he led the crew."


def shipwright_citations(folder: str, cites: str) -> tuple[str, ...]:
    """The final citations of a run whose synthesis answers Argus of Thespiae citing `cites` (no step judges any)."""
    model = world(root=SHIPWRIGHT_ROOT, judged={}, synth=f"ANSWER: Argus of Thespiae\nWHY: so it says {cites}.")
    _, _, result = run(model=model, knowledge=folder, confidence_threshold=0.99, exploration_budget=3)
    assert result.answer.answer == "Argus of Thespiae"
    return tuple(result.answer.citations)


def test_a_final_citation_of_a_window_names_only_the_line_holding_the_answer(tmp_path: Path) -> None:
    folder = written(tmp_path / "ship", SHIPWRIGHT)
    assert shipwright_citations(folder, "[docs:argo.md:1-4]") == ("docs:argo.md:3",)


def test_a_final_citation_whose_window_lacks_the_answer_is_dropped_when_another_line_says_it(tmp_path: Path) -> None:
    folder = written(tmp_path / "ship", SHIPWRIGHT)
    # crew.md names Argus, of and Thespiae (the check accepts it) but never says "Argus of Thespiae".
    assert shipwright_citations(folder, "[docs:crew.md:1-3] [docs:argo.md:1-4]") == ("docs:argo.md:3",)


def test_a_final_citation_whose_window_lacks_the_answer_stays_when_nothing_narrower_says_it(tmp_path: Path) -> None:
    folder = written(tmp_path / "ship", SHIPWRIGHT)
    assert shipwright_citations(folder, "[docs:crew.md:1-3]") == ("docs:crew.md:1-3",)


def test_the_citation_checker_accepts_a_narrowed_final_citation(tmp_path: Path) -> None:
    folder = written(tmp_path / "ship", SHIPWRIGHT)
    [cited] = shipwright_citations(folder, "[docs:argo.md:1-4]")
    with KnowledgeBase.open(folder) as kb:
        checks = CitationChecker(kb).check(f"The Argo was built by Argus of Thespiae [{cited}].").checks
    assert (cited, [c.status for c in checks]) == ("docs:argo.md:3", [CitationStatus.SUPPORTS])


WINDOW = {"docs:argo.md:1-3": "# The Argo\nThe ship was built\nby Argus of Thespiae."}


def test_a_citation_that_is_no_document_passage_is_not_narrowed() -> None:
    assert narrowed_citations("Argus", ["tool:calc", "docs:argo.md:1-3"], WINDOW) == ("tool:calc", "docs:argo.md:3")


def test_a_yes_or_no_answer_keeps_its_windows_as_cited() -> None:
    assert narrowed_citations("yes", ["docs:argo.md:1-3"], WINDOW) == ("docs:argo.md:1-3",)


def test_an_answer_only_a_heading_holds_keeps_its_window_whole() -> None:
    assert narrowed_citations("The Argo", ["docs:argo.md:1-3"], WINDOW) == ("docs:argo.md:1-3",)


def test_a_compared_fact_is_cited_by_the_line_stating_it_not_the_heading_naming_it() -> None:
    passage = "# Laleli Mosque\nThe Laleli Mosque is in Laleli, Fatih."
    assert line_stating("docs:06-mosque.md:1-2", passage, lambda text: "Laleli" in text) == "docs:06-mosque.md:2"


def test_a_compared_fact_two_lines_in_a_row_state_is_cited_by_the_first_of_them() -> None:
    passage = "Laleli Mosque was built in 1763.\nLaleli Mosque stands in Fatih.\nIt has one dome."
    assert line_stating("docs:06-mosque.md:4-6", passage, lambda text: "Laleli" in text) == "docs:06-mosque.md:4"


def test_an_answer_wrapped_over_two_lines_cites_those_two_lines() -> None:
    assert narrowed_citations("built by Argus", ["docs:argo.md:1-3"], WINDOW) == ("docs:argo.md:2-3",)


def test_a_yes_answer_keeps_only_the_passages_a_step_judged_for_yes(docs: str) -> None:
    judged = {"Yes": "1: SUPPORTS 0.9 Argus built it\n2: CONTRADICTS 0.9 it says Athena helped"}
    model = world(judged=judged, synth="ANSWER: Yes\nWHY: it says so.")
    _, _, result = run("Was the Argo built by Argus?", model=model, knowledge=docs, confidence_threshold=0.99,
                       exploration_budget=2)
    answer = result.answer
    assert answer.answer == "yes" and answer.citations and answer.flagged  # the span rules say yes/no in lower case
    assert all(c.status == "contradicts" for c in answer.flagged)
    assert not set(answer.citations) & {c.ref for c in answer.flagged}


@pytest.mark.parametrize("strategy", ["best_first", "weighted_vote", "synthesis"])
def test_settled_hypotheses_at_one_depth_merge_into_a_synthesis_node(docs: str, strategy: str) -> None:
    judged = {"Argus": "1: SUPPORTS 0.5 m", "Jason": "1: SUPPORTS 0.4 m", "Athena": "1: SUPPORTS 0.4 m"}
    stream, _, result = run(model=world(judged=judged), knowledge=docs, merge_threshold=3, merge_strategy=strategy,
                            exploration_budget=4)
    merge = result.syntheses[0]
    graph = stream.search.graph
    assert not merge.final and merge.method == strategy and graph.node(merge.node_id).kind is NodeKind.SYNTHESIS
    members = sorted(graph.parents(merge.node_id))
    assert len(members) == 3 and set(merge.sources) <= set(members)
    assert all(graph.edge(p, merge.node_id).kind is EdgeKind.AGGREGATION for p in members)
    assert all(result.tree[i].status is HypothesisStatus.MERGED for i in members)


# --- stopping -----------------------------------------------------------------------------------------


def test_a_confident_answer_stops_the_flow_before_its_exploration_budget(docs: str) -> None:
    sure = {**JUDGED, "Argus": "1: SUPPORTS 0.9 named\n2: SUPPORTS 0.9 again"}
    stream, _, result = run(model=world(judged=sure), knowledge=docs)
    assert result.stopped_by == "confidence_threshold" and result.statistics.explorations == 3
    assert stream.search.termination_reason == "confidence_reached" and stream.search.answer == "Argus"


def test_the_insight_target_stops_the_flow(docs: str) -> None:
    _, insights, result = run(model=world(), knowledge=docs, insight_target=2, confidence_threshold=0.99)
    assert result.stopped_by == "insight_target" and result.statistics.explorations == 0
    assert [i.type for i in insights][:3] == ["discovery", "discovery", "discovery"]


def test_breaking_out_of_the_stream_stops_the_run_with_no_further_call(docs: str) -> None:
    model = world()
    model.latency_s = 0.01

    async def go() -> Any:
        stream = research(QUESTION, knowledge=docs, model=model, controller=False, confidence_threshold=0.99)
        async for insight in stream:
            if insight.type == "evidence":
                calls = len(model.calls)
                break
        result = await stream.result()
        return stream, result, calls

    stream, result, calls = asyncio.run(go())
    assert result.stopped_by == "interrupted" and stream.search.termination_reason == "interrupted"
    assert len(model.calls) <= calls + 2  # only calls already in flight when the caller stopped
    assert result.answer is not None and result.answer.method == "best_first" and result.state == "collapsed"


def test_stop_ends_a_run_and_keeps_what_it_found(docs: str) -> None:
    model = world()
    model.latency_s = 0.05

    async def go() -> Any:
        stream = research(QUESTION, knowledge=docs, model=model, controller=False)
        async for insight in stream:
            if insight.type == "discovery":
                return await stream.stop()
        raise AssertionError("no insight")

    result = asyncio.run(go())
    assert result.stopped_by == "interrupted" and result.statistics.hypotheses_generated == 3


def test_a_spent_token_budget_still_ends_in_an_answer_from_what_was_tested(docs: str) -> None:
    from thoughtloom.llm.budget import BudgetLimits

    stream, _, result = run(model=world(), knowledge=docs, budget=BudgetLimits(tokens=700), confidence_threshold=0.99)
    assert stream.search.termination_reason == "budget_tokens"
    assert stream.search.usage.input_tokens + stream.search.usage.output_tokens <= 700
    assert result.answer is None or result.answer.method.startswith(("weighted_vote", "best_first"))


# --- settings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "allow", "said"), [
    ({"max_branches": 100}, "unbounded_branching", "unbounded branching"),
    ({"pruning_threshold": 0.0}, "no_pruning", "prunes nothing"),
    ({"confidence_threshold": 0.5}, "premature_convergence", "premature convergence"),
])
def test_each_anti_pattern_is_refused_in_one_line_unless_allowed(settings: dict[str, Any], allow: str, said: str) -> None:
    with pytest.raises(ResearchConfigError, match=said) as refused:
        ResearchConfig(**settings)
    assert "\n" not in str(refused.value) and allow in str(refused.value)
    ResearchConfig(**settings, allow=(allow,))


def test_research_refuses_an_anti_pattern_before_any_call() -> None:
    model = world()
    with pytest.raises(SpecError, match="unbounded branching"):
        research(QUESTION, model=model, max_branches=50)
    assert model.calls == []


def test_research_settings_on_another_strategy_are_refused() -> None:
    from thoughtloom.run.spec import resolve

    with pytest.raises(SpecError, match="research settings are for the research strategy"):
        resolve("4 5 6 10", task="game24", research={"max_branches": 3})


# --- roles ----------------------------------------------------------------------------------------------


def test_the_callers_own_roles_replace_the_built_in_ones(docs: str) -> None:
    asked: list[Any] = []

    def brancher(request: Any) -> list[str]:
        asked.append(request)
        return ["Argus - the builder", "Jason - the captain"]

    async def evaluator(h: Hypothesis) -> float:
        return 0.95 if h.answer == "Argus" else 0.05

    model = ScriptedBackend(default="1: SUPPORTS 0.9 x")
    _, _, result = run(model=model, knowledge=docs, brancher=brancher, evaluator=evaluator,
                       synthesizer=lambda q, hs: ("Argus", 0.99), merge_strategy="synthesis")
    assert asked[0].hypothesis is None and asked[0].passages and asked[0].n == 5
    assert result.answer.answer == "Argus" and result.answer.confidence == pytest.approx(0.95)
    assert not any("Hypotheses (" in c.prompt.as_text() for c in model.calls)


def test_a_role_on_its_own_model_sends_its_calls_there_within_the_same_budget(docs: str, server: Any) -> None:
    from openai_server import Reply

    server.responder = lambda seen: Reply(200, {
        "id": "x", "object": "chat.completion", "created": 0, "model": "big",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ANSWER: Argus\nWHY: it says so."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}})
    model = world()
    stream, _, result = run(model=model, knowledge=docs, confidence_threshold=0.99, exploration_budget=3,
                            role_models={"synthesizer": f"openai-compatible:{server.url}@big#chat"})
    assert len(server.seen) == 1 and "combine hypotheses" in str(server.seen[0].body["messages"])
    assert not any("combine hypotheses" in c.prompt.as_text() for c in model.calls)
    assert stream.search.usage.calls == len(model.calls) + 1 and result.answer.answer == "Argus"
    usage = stream.search.usage
    assert (usage.role("synthesizer").calls, usage.role("synthesizer").input_tokens) == (1, 40)  # type: ignore[union-attr]
    assert usage.role("main").calls == len(model.calls)  # type: ignore[union-attr]


# --- parsing the model's replies -------------------------------------------------------------------------


def test_proposals_keep_each_answer_once_with_a_stated_confidence() -> None:
    got = parse_proposals("1. Argus - built it (confidence 0.7)\n2) the Argus - again\n3. Jason: led it", 5)
    assert [(p.answer, p.confidence) for p in got] == [("Argus", 0.7), ("Jason", None)]


def test_judgements_are_read_by_passage_number_with_a_default_strength() -> None:
    got = parse_judgements("1: SUPPORTS 0.8 yes\n**2**: contradicts - no\n7: SUPPORTS 1 out of range", 3)
    assert [(j.index, j.verdict, j.strength) for j in got] == [(1, "supports", 0.8), (2, "contradicts", 0.6)]


def test_a_synthesis_reply_without_an_answer_line_answers_with_its_first_line() -> None:
    assert parse_synthesis("ANSWER: Argus\nWHY: named").answer == "Argus"
    assert parse_synthesis("Argus built it.\nMore.").answer == "Argus built it."
    assert parse_synthesis("  ") is None


# --- storage and replay -----------------------------------------------------------------------------------


def test_a_stored_research_run_replays_to_the_same_graph_with_no_model_or_tool_call(docs: str, tmp_path: Path) -> None:
    import shutil

    model = world()
    model.latency_s = 0.01
    store = str(tmp_path / "runs.db")
    stream, _, result = run(model=model, knowledge=docs, store=store, confidence_threshold=0.99, seed=7,
                            exploration_budget=4)
    live = len(model.calls)
    shutil.rmtree(docs)  # a replay reads the recorded tool calls, not the folder
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, stream.search.run_id))
    assert verdict.identical, str(verdict)
    assert (verdict.model_calls, verdict.tool_calls) == (0, 0) and verdict.tools_replayed > 0
    assert len(model.calls) == live and str(replayed.graph_cid) == str(stream.search.graph_cid)
    assert replayed.research.transitions == result.transitions
    assert replayed.research.answer.to_dict() == result.answer.to_dict()


def test_a_finished_stream_iterated_again_yields_nothing(docs: str) -> None:
    async def go() -> list[Any]:
        stream = research(QUESTION, knowledge=docs, model=world(), controller=False)
        first = [i async for i in stream]
        again = [i async for i in stream]
        return [first, again]

    first, again = asyncio.run(go())
    assert first and again == []
