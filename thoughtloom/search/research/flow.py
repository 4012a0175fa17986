"""The Research Flow's state machine: five states and, per state, exactly the directions seed 004 lists.

    dormant    --configure--> dormant      --start-->      streaming
    streaming  --explore-->   streaming    --branch-->     branching
               --evaluate-->  converging   --stop-->       collapsed
    branching  --expand-->    branching    --prune-->      branching   --stream--> streaming
    converging --merge-->     converging   --synthesize--> collapsed   --stream--> streaming
    collapsed  --harvest-->   collapsed    --reset-->      dormant

The seed names the directions; where each leads is ours: exploring, expanding, pruning and merging
are steps that stay in their state; `synthesize` makes the final answer, so it collapses the flow;
`stop` collapses it without one (a run cancelled before anything was found). A direction the
current state does not have is a bug in the flow's driver, and raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum


class FlowState(StrEnum):
    """Where a research flow is."""

    DORMANT = "dormant"
    STREAMING = "streaming"
    BRANCHING = "branching"
    CONVERGING = "converging"
    COLLAPSED = "collapsed"


_F = FlowState
#: Each state's directions and the state each leads to.
DIRECTIONS: dict[FlowState, dict[str, FlowState]] = {
    _F.DORMANT: {"start": _F.STREAMING, "configure": _F.DORMANT},
    _F.STREAMING: {"explore": _F.STREAMING, "branch": _F.BRANCHING, "evaluate": _F.CONVERGING, "stop": _F.COLLAPSED},
    _F.BRANCHING: {"expand": _F.BRANCHING, "prune": _F.BRANCHING, "stream": _F.STREAMING},
    _F.CONVERGING: {"merge": _F.CONVERGING, "synthesize": _F.COLLAPSED, "stream": _F.STREAMING},
    _F.COLLAPSED: {"reset": _F.DORMANT, "harvest": _F.COLLAPSED},
}


class IllegalFlowTransition(RuntimeError):
    """A direction the flow's current state does not have (a bug in whatever drives the flow)."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One move of the flow: from a state, by a direction, to a state."""

    source: FlowState
    direction: str
    target: FlowState

    def to_list(self) -> list[str]:
        """Plain-data form, [source, direction, target], as a stored run keeps it."""
        return [self.source.value, self.direction, self.target.value]


@dataclass
class FlowMachine:
    """The current state and every transition taken; `on_transition` hears each one as it happens."""

    state: FlowState = FlowState.DORMANT
    history: list[Transition] = field(default_factory=list)
    on_transition: Callable[[Transition], None] | None = None

    def directions(self) -> frozenset[str]:
        """The directions the current state has."""
        return frozenset(DIRECTIONS[self.state])

    def go(self, direction: str) -> FlowState:
        """Take a direction of the current state; raises IllegalFlowTransition for any other."""
        target = DIRECTIONS[self.state].get(direction)
        if target is None:
            have = ", ".join(sorted(DIRECTIONS[self.state]))
            raise IllegalFlowTransition(f"a {self.state.value} research flow cannot {direction!r} (it can: {have})")
        move = Transition(self.state, direction, target)
        self.state = target
        self.history.append(move)
        if self.on_transition is not None:
            self.on_transition(move)
        return target
