"""Search as a service: strategies served as OpenAI models by `loom serve`, each request one run.

A chat request naming a served strategy (`tot`, `research`, ...) becomes a RunSpec through
`resolve` and runs through `execute`, as `loom solve` would run its last user message: the same
task choice, profile and controller. The request picks only the strategy and a budget below the
operator's caps; the model, the store, the tools (research's calculator, nothing else) and every
other setting are the operator's. Runs at once are bounded, and a cancelled request cancels its run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..llm.budget import BudgetLimits
from ..llm.serve import ApiError, SearchAsk, SearchReply
from ..llm.types import Backend
from ..search.stop import StopReason
from ..search.strategies.registry import built_in_names, unsupported_reason
from ..tasks.registry import get_task
from .execute import execute
from .spec import RunSpec, research_tools, resolve

#: OpenAI model names that stand for a strategy under a shorter name.
ALIASES = {"tot": "tree_of_thoughts"}
#: Strategies a request cannot have: the agent calls the tools it is granted, a grant the operator
#: would make for every caller, which serving does not offer.
UNSERVED = ("agent",)
#: What `StrategyService.check` resolves at start: a free-form question, as any request may ask.
SAMPLE_PROBLEM = "Why is the sky blue?"
#: Stop reasons that mean the budget, not the search, ended the answer (finish_reason "length").
_OUT_OF_BUDGET = frozenset({StopReason.BUDGET_TOKENS, StopReason.BUDGET_CALLS})


def servable_strategies() -> tuple[str, ...]:
    """The strategies that can search a free-form problem (the general task) and need no operator grant."""
    general = get_task("general")
    return tuple(s for s in built_in_names() if s not in UNSERVED and unsupported_reason(s, general) is None)


def served_names(given: str) -> tuple[str, ...]:
    """The model names a comma-separated list gives ("all": every servable strategy and alias); ValueError (one
    line) for a name that is not one."""
    servable = servable_strategies()
    names: list[str] = []
    for name in (n.strip() for n in given.split(",")):
        if name == "all":
            names += [*servable, *(a for a, s in ALIASES.items() if s in servable)]
        elif name in servable or ALIASES.get(name) in servable:
            names.append(name)
        else:
            known = ", ".join([*servable, *ALIASES])
            raise ValueError(f"{name!r} is not a strategy that can be served; choose from {known}, or all")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """What the operator decides for every served search."""

    #: The served model names (strategies, or their aliases).
    names: tuple[str, ...]
    #: The model the searches run over: a spec, or the served Backend object (shared, not closed by a run).
    model: str | Backend
    #: Where runs are recorded (a SQLite path); None: not stored, and replies carry no run id.
    store: str | None = None
    #: Hard caps per request: tokens and wall-clock seconds; a request may ask for less, never more.
    max_tokens: int = 20_000
    max_seconds: float = 300.0
    #: Searches running at once; one more is a 503.
    max_runs: int = 2
    #: The domain profile runs are resolved with (as `loom solve --profile`).
    profile: str = "default"

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("no strategy to serve")
        if self.max_tokens < 1 or not 0 < self.max_seconds < float("inf") or self.max_runs < 1:
            raise ValueError("the per-request caps and the runs at once must be positive")


class StrategyService:
    """Served searches (llm.serve.ServedSearches): each request is resolved and executed as one run."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self._running = 0

    @property
    def names(self) -> tuple[str, ...]:
        """The model names that run a search."""
        return self.settings.names

    def budget(self, ask: SearchAsk) -> BudgetLimits:
        """The request's hard budget: what it asked for, refused (400) past the operator's caps."""
        s = self.settings
        if ask.tokens is not None and ask.tokens > s.max_tokens:
            raise ApiError(400, f"{ask.tokens_param} asks for {ask.tokens:,} tokens; this server allows a search at "
                                f"most {s.max_tokens:,}", param=ask.tokens_param, code="budget_exceeded")
        if ask.seconds is not None and ask.seconds > s.max_seconds:
            raise ApiError(400, f"thoughtloom.budget_seconds asks for {ask.seconds:g} s; this server allows a search "
                                f"at most {s.max_seconds:g} s", param="thoughtloom.budget_seconds",
                           code="budget_exceeded")
        return BudgetLimits(tokens=ask.tokens or s.max_tokens, wall_s=ask.seconds or s.max_seconds)

    def check(self) -> None:
        """Resolve a free-form question with each served strategy as a request would, so that settings no
        request could run with (a profile that needs a knowledge folder, ...) fail once at start, not on every
        request (ValueError, one line)."""
        for name in self.names:
            self._spec(SAMPLE_PROBLEM, ALIASES.get(name, name), BudgetLimits(tokens=self.settings.max_tokens), None)

    def _spec(self, problem: str, strategy: str, budget: BudgetLimits, store: str | None) -> RunSpec:
        """The run a request for `strategy` on `problem` makes: the operator's model, profile and tools."""
        tools: Sequence[str] = research_tools(None) if strategy == "research" else ()
        return resolve(problem, model=self.settings.model, profile=self.settings.profile,
                       search={"strategy": strategy}, budget=budget, store=store, tools=tools)

    async def run(self, ask: SearchAsk, started: Callable[[str | None], None]) -> SearchReply:
        """Resolve and execute the ask's run; `started(run_id)` once it is recorded (None when nothing stores it)."""
        s = self.settings
        if ask.name not in s.names:
            raise ApiError(404, f"The model {ask.name!r} is not served here", param="model", code="model_not_found")
        strategy = ALIASES.get(ask.name, ask.name)
        budget = self.budget(ask)
        if self._running >= s.max_runs:
            raise ApiError(503, f"the server runs {self._running} searches, its most; retry shortly",
                           kind="server_error", code="too_many_searches")
        try:
            spec = self._spec(ask.problem, strategy, budget, s.store)
        except ValueError as exc:  # the problem does not fit (SpecError, ProblemError, ...): the client's to fix
            raise ApiError(400, str(exc), param="messages", code="invalid_problem") from None
        self._running += 1
        try:
            if spec.store is None:
                started(None)
            result = await execute(spec, on_stored=started)
        finally:
            self._running -= 1
        reason = result.termination_reason
        details = {"strategy": strategy, "stop_reason": str(reason), "run_id": result.run_id}
        return SearchReply(
            answer=result.answer or "", run_id=result.run_id, prompt_tokens=result.usage.input_tokens,
            completion_tokens=result.usage.output_tokens,
            finish_reason="length" if result.answer is None and reason in _OUT_OF_BUDGET else "stop", details=details)
