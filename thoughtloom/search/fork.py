"""Where a fork starts: a stored run's path from the root down to one node, grafted into a new search.

A fork (`loom fork RUN --at NODE`, `thoughtloom.fork`) is a new run of the same task and problem
whose graph begins with the parent's thoughts from below the root down to NODE, copied as they
were (content, kind, score and creator; each marked `forked_from` with its run and id there),
and whose strategy starts from NODE instead of the root. The copied thoughts cost the fork
nothing: only what it does below NODE is asked of the model. The path is kept in the fork's spec
as plain data, so a fork replays from its own record, without its parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeGuard

from ..graph import NodeKind

if TYPE_CHECKING:
    from .context import SearchContext


@dataclass(frozen=True, slots=True)
class ForkExtra:
    """The node.extra key a fork writes on each copied thought: where it came from (run and node id there)."""

    forked_from: str = "forked_from"


EXTRA: Final = ForkExtra()


class ForkError(ValueError):
    """A fork point that cannot be used (one line)."""


@dataclass(frozen=True, slots=True)
class ForkStep:
    """One thought of the copied path, as the parent run stored it (`node`: its id there)."""

    node: int
    kind: str
    content: str
    score: float
    creator: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"node": self.node, "kind": self.kind, "content": self.content, "score": self.score,
                "creator": self.creator}

    @classmethod
    def from_dict(cls, step: Any) -> ForkStep:
        """Read `to_dict`'s form back (ForkError names what is wrong)."""
        if not isinstance(step, Mapping):
            raise ForkError("fork.steps must hold mappings")
        nid, kind, content, score = step.get("node"), step.get("kind"), step.get("content"), step.get("score")
        creator = step.get("creator")
        if not (_whole(nid) and kind in _KINDS and isinstance(content, str) and isinstance(creator, str)
                and isinstance(score, (int, float)) and not isinstance(score, bool) and 0.0 <= score <= 1.0):
            raise ForkError("fork.steps: each needs a node id, a node kind, text content and creator, "
                            "and a score in [0, 1]")
        return cls(nid, kind, content, float(score), creator)


_KINDS = frozenset(k.value for k in NodeKind)


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """The parent run, the node the fork starts from, and the thoughts from below the root down to it."""

    run: str
    node: int
    steps: tuple[ForkStep, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form a fork's spec keeps."""
        return {"run": self.run, "node": self.node, "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, data: Any) -> ForkPoint:
        """Read `to_dict`'s form back; ForkError names what is wrong (a stored spec is untrusted)."""
        if not isinstance(data, Mapping):
            raise ForkError("fork must be a mapping")
        run, node, steps = data.get("run"), data.get("node"), data.get("steps")
        if not isinstance(run, str) or not _whole(node):
            raise ForkError("fork must name a run (text) and a node (a number >= 0)")
        if not isinstance(steps, list):
            raise ForkError("fork.steps must be a list")
        return cls(run, node, tuple(ForkStep.from_dict(step) for step in steps))


def graft(ctx: SearchContext, point: ForkPoint) -> int:
    """Copy the fork's path below the context's root, scored as stored, and start the strategy from its end.

    Returns the node the strategy starts from (the root for a fork at the root). The threshold does
    not prune the copied thoughts: the user chose that path, a pruned thought included.
    """
    parent = ctx.root
    score = ctx.scorer()
    for step in point.steps:
        nid = ctx.add_thought([parent], step.content, step.creator, kind=NodeKind(step.kind))
        if nid is None:
            raise ForkError(f"the fork's path of {len(point.steps)} thoughts does not fit in max_nodes "
                            f"{ctx.config.max_nodes}")
        # The parent's metadata (evaluations, grounding) is not copied: it is untrusted data the search would read.
        ctx.graph.node(nid).extra[EXTRA.forked_from] = {"run": point.run, "node": step.node}
        score(nid, step.score)
        ctx.revive(nid)
        ctx.seen[ctx.task.state_key(ctx.problem, ctx.steps(nid))] = nid
        parent = nid
    ctx.start = parent
    return parent


__all__ = ["ForkError", "ForkPoint", "ForkStep", "graft"]
