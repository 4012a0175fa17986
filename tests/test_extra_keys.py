"""The node.extra keys each search module writes are declared by it, under the names stored runs carry."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, asdict

import pytest

from thoughtloom.search.agent.processors import EXTRA as AGENT
from thoughtloom.search.context import EXTRA as CONTEXT
from thoughtloom.search.fork import EXTRA as FORK
from thoughtloom.search.grounding_step import EXTRA as GROUNDING
from thoughtloom.search.operators import EXTRA as OPERATORS
from thoughtloom.search.recursive.solver import EXTRA as RECURSION
from thoughtloom.search.research.explorer import EXTRA as RESEARCH
from thoughtloom.search.strategies.cove import EXTRA as COVE
from thoughtloom.search.strategies.recursive import EXTRA as RECURSIVE

# Stored runs and `--json` graphs carry these names: renaming one would break every stored run.
STORED = {
    OPERATORS: {"samples", "evaluation", "tally"},
    CONTEXT: {"rejected"},
    GROUNDING: {"grounding"},
    RECURSION: {"recursion", "rejected"},
    RESEARCH: {"research", "hops", "evidence", "hypothesis", "synthesis", "tool_calls"},
    AGENT: {"status", "text", "result", "error", "tool_calls", "tally", "agreed", "made", "kind",
            "refused_edges", "retried_as", "retry_of", "feedback", "steps", "step", "tool", "spec", "sample", "round",
            "tools", "agent_summary"},
    RECURSIVE: {"recursion_summary"},
    COVE: {"cove"},
    FORK: {"forked_from"},
}


@pytest.mark.parametrize("keys", list(STORED), ids=["operators", "context", "grounding", "recursion", "research", "agent",
                                                       "recursive", "cove", "fork"])
def test_each_key_is_stored_under_its_own_name(keys):
    assert {name: name for name in STORED[keys]} == asdict(keys)


def test_a_declared_key_cannot_be_changed_at_run_time():
    with pytest.raises(FrozenInstanceError):
        OPERATORS.tally = "votes"  # type: ignore[misc]
