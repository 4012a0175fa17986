"""Stored runs, in process: incremental recording, head chains, canonical graph CIDs, replay order, corruption."""

from __future__ import annotations

import asyncio
import random
import re
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from thoughtloom.api import asolve
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import Completion, GenerateRequest, Prompt
from thoughtloom.search.config import SearchConfig
from thoughtloom.store.blocks import CorruptBlock, cid_bytes
from thoughtloom.store.memory import MemoryStore
from thoughtloom.store.replay import ReplayBackend
from thoughtloom.store.runs import (
    RunError,
    history,
    load_calls,
    load_graph,
    new_run_id,
    open_run,
    resolve_run,
)
from thoughtloom.api import areplay
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import get_obj

PROPOSALS = {
    "4 5 6 10": "10 - 4 = 6 (left: 5 6 6)\n4 + 5 = 11 (left: 6 10 11)\n7 * 7 = 49 (left: 4 5 49)\n6 + 10 = 16 (left: 4 5 16)",
    "5 6 6": "5 * 6 = 30 (left: 6 30)\n6 - 5 = 1 (left: 1 6)",
    "6 9 10": "9 + 10 = 19 (left: 6 19)",
    "4 5 16": "4 * 5 = 20 (left: 16 20)",
    "6 30": "30 - 6 = 24 (left: 24)",
}
VALUES = {"sure": "sure", "likely": "likely", "impossible": "impossible"}


def game24_reply(request: GenerateRequest, index: int) -> str:
    """A scripted model that knows one path to 24 for "4 5 6 10" and values states by a fixed rule."""
    prompt = request.prompt.as_text()
    if "Evaluate if" in prompt:
        numbers = re.findall(r"\n([\d ]+)\n[^\n]*$", prompt.rstrip())
        state = numbers[-1] if numbers else ""
        return "sure" if "30" in state or "24" in state else ["likely", "impossible"][(len(state) + index) % 2]
    numbers = re.findall(r"Input: ([\d ]+)\nPossible", prompt)[-1]
    return PROPOSALS.get(numbers, "1 + 1 = 2 (left: 2)")


class JitteryBackend(ScriptedBackend):
    """Answers after a random delay, so concurrent calls complete in a different order every run."""

    def __init__(self, seed: int) -> None:
        super().__init__(responder=game24_reply, name="fake:jittery")
        self.rng = random.Random(seed)
        self.open = 0
        self.most_open = 0

    async def generate(self, request: GenerateRequest) -> Completion:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(self.rng.uniform(0, 0.01))
            return await super().generate(request)
        finally:
            self.open -= 1


class CountingStore(SQLiteStore):
    """Counts transactions and ref moves, in order."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.log: list[str] = []

    def put_many(self, items: Any) -> None:
        self.log.append("put_many")
        super().put_many(items)

    def set_ref(self, name: str, cid: str) -> None:
        self.log.append("set_ref")
        super().set_ref(name, cid)


CONFIG = SearchConfig(strategy="bfs", breadth=4, beam=3, max_depth=3, value_samples=2, concurrency=8)


def record(store: Any, backend: Any, run_id: str = "run1", config: SearchConfig = CONFIG) -> Any:
    return asyncio.run(asolve("4 5 6 10", task="game24", model=backend, config=config, store=store, run_id=run_id))


def test_every_completed_call_is_one_transaction_then_the_ref_moves(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "s.db")
    backend = ScriptedBackend(responder=game24_reply)
    result = record(store, backend)
    assert result.answer is not None
    calls = len(backend.calls)
    # One flush per backend exchange plus the final one; each is put_many then set_ref.
    assert store.log == ["put_many", "set_ref"] * (calls + 1)
    with SQLiteStore(tmp_path / "s.db") as reopened:
        run = open_run(reopened, "run1")
        assert run.status == "finished"
        assert run.result is not None and run.result["answer"] == result.answer
        assert run.head["usage"]["calls"] == calls
        assert len(load_calls(reopened, run.calls_cid)) == calls


def test_heads_chain_through_prev_and_old_node_versions_stay_reachable(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        backend = ScriptedBackend(responder=game24_reply)
        record(store, backend)
        run = open_run(store, "run1")
        heads = list(history(store, run.head_cid))
        assert [h["seq"] for _, h in heads] == list(range(len(heads) - 1, -1, -1))
        assert heads[-1][1]["prev"] is None and heads[-1][1]["status"] == "running"
        assert heads[0][1]["status"] == "finished"
        # The first saved state (after the first call) has only the root; the first one holding
        # node 1 has it unscored: its value call had not been answered yet.
        assert len(load_graph(store, heads[-1][1]["graph"].cid).graph) == 1
        first = next(g for g in (load_graph(store, h["graph"].cid) for _, h in reversed(heads)) if len(g.graph) > 1)
        final = load_graph(store, run.graph_cid)
        assert len(first.graph) < len(final.graph)
        assert first.graph.node(1).score is None and final.graph.node(1).score is not None
        assert first.versions[1] != final.versions[1]  # updating a node made a new block ...
        assert store.has(first.versions[1])  # ... and the old version is still there
        # Both versions share the node's immutable part (content, parents).
        assert get_obj(store, first.versions[1])["thought"] == get_obj(store, final.versions[1])["thought"]


def test_the_graph_cid_has_no_wall_clock_in_it(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as a, SQLiteStore(tmp_path / "b.db") as b:
        record(a, ScriptedBackend(responder=game24_reply), "one")
        record(b, ScriptedBackend(responder=game24_reply), "two")
        run_a, run_b = open_run(a, "one"), open_run(b, "two")
        assert run_a.head_cid != run_b.head_cid  # different runs, different times
        assert run_a.graph_cid == run_b.graph_cid  # the same search, the same graph


@pytest.mark.parametrize("seed", [1, 2])
def test_replay_rebuilds_the_same_graph_cid_from_concurrent_calls(tmp_path: Path, seed: int) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        original = JitteryBackend(seed)
        result = record(store, original)
        assert original.most_open > 1  # calls really overlapped
        for _ in range(2):
            replayed, verdict = asyncio.run(areplay(store, "run1"))
            assert verdict.identical, str(verdict)
            assert verdict.model_calls == 0 and verdict.replayed == len(original.calls)
            assert verdict.got == open_run(store, "run1").graph_cid
            assert replayed.answer == result.answer


def test_a_changed_search_diverges_at_the_first_differing_node(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        record(store, ScriptedBackend(responder=game24_reply))
        stored = load_graph(store, open_run(store, "run1").graph_cid).graph
        # Pruning everything below 0.5 changes the status of the first weak thought.
        pruned_first = min(n.id for n in stored if n.score is not None and n.score < 0.5)
        _, verdict = asyncio.run(areplay(store, "run1", config=SearchConfig(prune_threshold=0.5)))
        assert not verdict.identical
        assert verdict.divergence is not None and verdict.divergence.node_id == pruned_first
        assert "pruned" in verdict.divergence.replayed
        assert f"first diverging node #{pruned_first}" in str(verdict)
        assert "search config differs: prune_threshold" in str(verdict)


def test_a_request_the_record_does_not_hold_is_a_divergence_not_a_model_call() -> None:
    backend = ReplayBackend([], name="fake", max_concurrency=4)
    with pytest.raises(Exception, match="replay diverged: the search asked for a call that was not recorded"):
        asyncio.run(backend.generate(GenerateRequest(prompt=__import__("thoughtloom.llm.types").llm.types.Prompt("hi"))))
    assert backend.live_calls == 0 and backend.divergence is not None


def test_a_tampered_block_is_reported_as_corrupt_not_used(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        record(store, ScriptedBackend(responder=game24_reply))
        victim = load_graph(store, open_run(store, "run1").graph_cid).versions[1]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE blocks SET data = ? WHERE cid = ?", (b"\xa1atbforged", cid_bytes(victim)))
    with SQLiteStore(path) as store:
        run = open_run(store, "run1")
        with pytest.raises(CorruptBlock, match=victim):
            load_graph(store, run.graph_cid)


def test_run_ids_are_short_time_ordered_and_prefix_matched() -> None:
    early, late = new_run_id(1_800_000_000), new_run_id(1_800_000_100)
    assert len(early) == 10 and early < late
    store = MemoryStore()
    for run_id in ("abc123", "abd456"):
        store.set_ref(f"run/{run_id}/head", "bafy")
    assert resolve_run(store, "abc") == "abc123"
    with pytest.raises(RunError, match="ambiguous"):
        resolve_run(store, "ab")
    with pytest.raises(RunError, match="no run 'zz'"):
        resolve_run(store, "zz")


def test_a_search_without_a_store_is_untouched() -> None:
    backend = ScriptedBackend(responder=game24_reply)
    result = asyncio.run(asolve("4 5 6 10", task="game24", model=backend, config=CONFIG))
    assert type(result.graph).__name__ == "ThoughtGraph" and backend.calls


# --- which prompt form a replay matches on ------------------------------------------------------

def _key(text: str, chat: str, stop: tuple[str, ...], form: str | None) -> tuple[Any, ...]:
    from thoughtloom.llm.types import Message
    from thoughtloom.store.runs import request_key

    return request_key(Prompt(text=text, messages=(Message("user", chat),)), 1, 8, 0.7, stop, 1, form)


def test_a_completions_backend_replay_ignores_changes_to_the_chat_form() -> None:
    assert _key("T", "old chat", ("\n",), "text") == _key("T", "new chat", ("\n",), "text")
    assert _key("T", "c", ("\n",), "text") != _key("T2", "c", ("\n",), "text")


def test_a_chat_backend_replay_ignores_the_completion_text_and_stops() -> None:
    assert _key("old text", "C", ("\n",), "chat") == _key("new text", "C", (), "chat")
    assert _key("T", "C", (), "chat") != _key("T", "C2", (), "chat")


def test_a_request_that_pinned_the_chat_form_replays_with_its_stop_strings() -> None:
    from thoughtloom.llm.types import Message
    from thoughtloom.store.runs import request_key

    def pinned(stop: tuple[str, ...]) -> tuple[Any, ...]:
        prompt = Prompt(text="T", messages=(Message("user", "C"),))
        return request_key(prompt, 1, 8, 0.7, stop, 1, "text", pinned="chat")

    assert pinned(("\n",)) != pinned(())
    assert pinned(()) != _key("T", "C", (), "chat")  # nor is it an unpinned chat request


def test_a_replay_of_an_unknown_backend_matches_both_forms() -> None:
    assert _key("T", "old chat", (), None) != _key("T", "new chat", (), None)


@pytest.mark.parametrize(("identity", "form"), [
    ("openai-compatible:http://127.0.0.1:1/v1@m#completions", "text"),
    ("openai:gpt-4o-mini", "chat"),
    ("local:gemma-3-270m-q4_k_m", "text"),
    ("local:qwen2.5-coder-0.5b", "chat"),
    ("local:/models/x.gguf", None),
    ("scripted", None),
])
def test_the_prompt_form_a_recorded_backend_read_comes_from_its_identity(identity: str, form: str | None) -> None:
    from thoughtloom.run.session import prompt_form

    assert prompt_form(identity) == form
