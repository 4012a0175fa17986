"""--mermaid on a big search: capped to Mermaid's own limits (best path + frontier + "N more"), --mermaid-full draws all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.graph import NodeStatus, ThoughtGraph
from thoughtloom.tasks.game24 import legal_steps
from thoughtloom.views.mermaid import MERMAID_MAX_EDGES, MERMAID_MAX_TEXT, to_mermaid
from machine import scaled

LONG = "a thought of the kind a model writes, long enough to fill its label to the brim " * 2


def big_graph(levels: int = 3, fanout: int = 13) -> tuple[ThoughtGraph, list[int]]:
    """A tree of 1 + 13 + 169 + 2197 nodes with full labels and scores; its best path is the first child each time."""
    graph = ThoughtGraph()
    root = graph.add_node("root")
    level, best = [root.id], [root.id]
    for depth in range(levels):
        nxt = []
        for parent in level:
            for k in range(fanout):
                nxt.append(graph.add_node(f"{depth}.{k} {LONG}", parents=[parent], score=k / fanout).id)
        best.append(graph.children(best[-1])[0])
        level = nxt
    return graph, best


def node_lines(text: str) -> list[str]:
    return re.findall(r"^    n\d+\[", text, flags=re.MULTILINE)


def edge_lines(text: str) -> list[str]:
    return re.findall(r"^    n\d+ \S+ n\d+$", text, flags=re.MULTILINE)


def test_a_big_graph_is_drawn_within_mermaids_text_and_edge_limits() -> None:
    graph, best = big_graph()
    assert len(to_mermaid(graph, best, full=True)) > MERMAID_MAX_TEXT  # the premise: uncapped it is too big
    text = to_mermaid(graph, best)
    assert len(text) <= MERMAID_MAX_TEXT
    assert len(edge_lines(text)) <= MERMAID_MAX_EDGES


def test_the_capped_picture_keeps_the_best_path_highlighted() -> None:
    graph, best = big_graph()
    text = to_mermaid(graph, best)
    for node_id in best:
        assert re.search(rf"^    n{node_id}\[", text, flags=re.MULTILINE)
    assert re.search(r"class (n\d+,)*n" + str(best[-1]) + r"\b.* best", text)
    assert "linkStyle" in text


def test_the_capped_picture_says_how_many_thoughts_it_left_out() -> None:
    graph, best = big_graph()
    text = to_mermaid(graph, best)
    drawn = len(node_lines(text))
    assert f"… {len(graph) - drawn} more thoughts not drawn" in text
    assert "--mermaid-full" in text


def test_the_capped_picture_draws_the_best_scored_frontier_and_not_pruned_leaves() -> None:
    graph = ThoughtGraph()
    root = graph.add_node("root")
    leaves = [graph.add_node(f"leaf {i}", parents=[root.id], score=i / 300) for i in range(300)]
    pruned = graph.add_node("pruned but high", parents=[root.id], score=1.0)
    graph.set_status(pruned.id, NodeStatus.PRUNED)
    text = to_mermaid(graph, [root.id], max_nodes=50)
    assert re.search(rf"^    n{leaves[-1].id}\[", text, flags=re.MULTILINE)  # the best-scored open leaf
    assert not re.search(rf"^    n{leaves[0].id}\[", text, flags=re.MULTILINE)  # the worst is summarized
    assert not re.search(rf"^    n{pruned.id}\[", text, flags=re.MULTILINE)
    assert len(node_lines(text)) == 50


def test_full_draws_every_node_and_edge() -> None:
    graph, best = big_graph()
    text = to_mermaid(graph, best, full=True)
    assert len(node_lines(text)) == len(graph)
    assert len(edge_lines(text)) == len(graph.edges)
    assert "more thoughts not drawn" not in text


def test_a_small_graph_is_drawn_whole_without_a_summary() -> None:
    graph, best = big_graph(levels=1, fanout=5)
    text = to_mermaid(graph, best)
    assert len(node_lines(text)) == len(graph) == 6
    assert "more" not in text.split("classDef")[0]


# --- through `loom solve` with a scripted model --------------------------------------------------


def every_step_reply(seen: Seen) -> Reply:
    """A scripted game24 model that proposes every legal step of the numbers it is shown."""
    prompt = seen.body.get("prompt") or seen.body["messages"][-1]["content"]
    n = int(seen.body.get("n") or 1)
    if prompt.startswith("Evaluate if"):
        text = "likely"
    else:
        numbers = [Fraction(x) for x in re.findall(r"Input: ([\d ]+)\nPossible", prompt)[-1].split()]
        text = "\n".join(legal_steps(numbers))
    return Reply(200, {
        "id": "x", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": i, "text": text, "finish_reason": "stop"} for i in range(n)],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    })


def loom(*args: str) -> subprocess.CompletedProcess[str]:
    """Run loom as a user would."""
    return subprocess.run([sys.executable, "-m", "thoughtloom", *args], check=False, capture_output=True, text=True,
                          timeout=scaled(300), env=dict(os.environ), cwd=Path(__file__).parents[1])


def solve_with_mermaid(server: FakeOpenAIServer, target: Path, *extra: str, store: str | None = None) -> tuple[str, int]:
    """The picture `loom solve --mermaid` writes of a ~200-node search, and the search's node count."""
    server.responder = every_step_reply
    proc = subprocess.run(
        [sys.executable, "-m", "thoughtloom", "solve", "--task", "game24", "--model",
         f"openai-compatible:{server.url}@scripted#completions", "--strategy", "bfs", "--beam", "10", "--depth", "3",
         "--budget-tokens", "1000000", "--quiet", "--json", *(["--store", store] if store else ["--no-store"]), "--mermaid", str(target), *extra,
         "4 5 6 10"],
        check=False, capture_output=True, text=True, timeout=scaled(300), env=dict(os.environ), cwd=Path(__file__).parents[1],
    )
    assert proc.returncode == 0, proc.stderr
    return target.read_text(encoding="utf-8"), json.loads(proc.stdout)["stats"]["nodes"]


def test_loom_solve_caps_a_big_searchs_mermaid(server: FakeOpenAIServer, tmp_path: Path) -> None:
    text, nodes = solve_with_mermaid(server, tmp_path / "g.mmd")
    hidden = int(re.search(r"… (\d+) more thoughts not drawn", text).group(1))
    assert len(node_lines(text)) + hidden == nodes
    assert len(text) <= MERMAID_MAX_TEXT and len(edge_lines(text)) <= MERMAID_MAX_EDGES


def test_loom_solve_mermaid_full_draws_the_whole_search(server: FakeOpenAIServer, tmp_path: Path) -> None:
    full, nodes = solve_with_mermaid(server, tmp_path / "full.mmd", "--mermaid-full")
    assert "more thoughts not drawn" not in full
    assert len(node_lines(full)) == nodes > 150


def test_loom_show_caps_a_stored_runs_mermaid_and_draws_it_whole_with_mermaid_full(server: FakeOpenAIServer,
                                                                                 tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    solved, nodes = solve_with_mermaid(server, tmp_path / "solved.mmd", store=store)
    run_id = json.loads(loom("runs", "--store", store, "--json").stdout.splitlines()[0])["id"]
    assert loom("show", run_id, "--store", store, "--mermaid", str(tmp_path / "capped.mmd")).returncode == 0
    assert loom("show", run_id, "--store", store, "--mermaid", str(tmp_path / "full.mmd"), "--mermaid-full").returncode == 0
    capped, full = (tmp_path / "capped.mmd").read_text(), (tmp_path / "full.mmd").read_text()
    assert set(node_lines(capped)) == set(node_lines(solved))  # the same thoughts as solve drew
    assert "more thoughts not drawn" in capped and "more thoughts not drawn" not in full
    assert len(node_lines(full)) == nodes
