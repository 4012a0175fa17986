"""The operators: generate, evaluate, aggregate, refine and synthesize (plus the task's validate hook).

Each operator builds prompts through the task (the prompter), calls the model through the
gateway, parses the replies through the task (the parser) and turns results into nodes and edges.

Each call is made in a role, so that a role may run on a model of its own (seed 001's separate
generator, evaluator and synthesizer; seed 000's cheaper evaluator): generate and refine write
thoughts (generator); value and vote score them (evaluator); aggregate merges several thoughts
into one and synthesize writes the final answer (synthesizer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from ..graph import EdgeKind, NodeKind, NodeStatus
from ..llm.inline import Later
from ..llm.types import parse_choice_text
from ..tasks.base import Query
from ..tasks.evaluation import Evaluation
from ..tasks.query import Sampled
from .context import Answer, SearchContext
from .eager import eager_gather
from .scorer import ThoughtScorer

_S = NodeStatus
#: The roles the operators' calls are made in (see the module docstring).
GENERATOR, EVALUATOR, SYNTHESIZER = "generator", "evaluator", "synthesizer"
#: Each re-ask samples this much hotter than the search's temperature, up to the maximum.
REASK_HEAT, MAX_REASK_TEMPERATURE = 0.3, 1.3


@dataclass(frozen=True, slots=True)
class OperatorExtra:
    """The node.extra keys the operators write: how many samples gave a thought, its evaluation, a vote's
    account."""

    samples: str = "samples"
    evaluation: str = "evaluation"
    tally: str = "tally"


EXTRA: Final = OperatorExtra()


async def generate(ctx: SearchContext, node_id: int, attempt: int = 0) -> Proposals | None:
    """Candidate next thoughts for a node: one propose call, or `breadth` independent samples.

    When grounding failed the node, the task may turn the evidence into a revision prompt. When
    the task lists the valid next steps (query.choices), the model chooses among them: all of
    them, likeliest first, from one scoring call where the backend can score; otherwise samples.
    attempt: how many times this node's proposals were all rejected already (each re-ask
    samples hotter, with a seed of its own).
    """
    task, problem = ctx.task, ctx.problem
    steps = ctx.steps(node_id)
    propose = ctx.config.generation == "propose"
    query = _generation_query(ctx, node_id)
    if attempt:
        query = replace(query, temperature=min(MAX_REASK_TEMPERATURE, ctx.temperature + REASK_HEAT * attempt))
    key = steps if not attempt else (steps, "again", attempt)
    if query.choices and ctx.scores_choices:
        got = await ctx.ask(query, 1, "generate", key, GENERATOR)
        if got is None:
            return None
        texts, cost = got
        odds = parse_choice_text(texts[0], query.choices)
        if odds is None:
            return Proposals([], cost)
        # Likeliest first; expand keeps the first `breadth` that pass validation.
        return Proposals(sorted(query.choices, key=lambda c: -odds[c]), cost, odds)
    # A propose reply lists several steps; a backend that cannot score the choices writes them freely.
    got = await ctx.ask(query, 1 if propose else ctx.breadth, "generate", key, GENERATOR)
    if got is None:
        return None
    texts, cost = got
    if propose:
        # Not cut to `breadth` here: expand keeps the first `breadth` that pass validation.
        thoughts = task.parse_proposals(problem, steps, texts[0])
    else:
        thoughts = [t for t in (task.parse_sample(problem, steps, x) for x in texts) if t]
    distinct = list(dict.fromkeys(thoughts))
    # A task that counts agreeing samples counts a repeated one as often as it came.
    repeats = not propose and ctx.task_tallies and len(distinct) < len(thoughts)
    return Proposals(distinct, cost, times=Counter(thoughts) if repeats else None)


def _generation_query(ctx: SearchContext, node_id: int) -> Query:
    """What a node's children are asked with: a revision when its grounding failed, else a propose or sample prompt."""
    task, problem, steps = ctx.task, ctx.problem, ctx.steps(node_id)
    grounded = ctx.grounding.get(node_id)
    if grounded is not None and grounded.verified is False:
        revision = task.revise(problem, steps, grounded.evidence)
        if revision is not None:
            return revision
    if ctx.config.generation == "propose":
        return task.propose(problem, steps, ctx.breadth)
    return task.sample(problem, steps)


@dataclass(slots=True)
class Proposals:
    """What one generate call proposed, in order, and (when the model scored the task's choices) how likely each was."""

    thoughts: list[str]
    cost: int
    odds: dict[str, float] | None = None
    #: How many samples gave each thought, where some came more than once and the task counts them.
    times: Counter[str] | None = None

    def prior(self, thought: str) -> float | None:
        """The thought's probability relative to the model's favourite step (1 for that one); None without odds."""
        if not self.odds:
            return None
        return self.odds.get(thought, 0.0) / max(self.odds.values())


async def expand(ctx: SearchContext, node_id: int) -> list[int]:
    """Generate, validate, deduplicate and evaluate a node's children; return the scored ones.

    Up to `breadth` new children are kept: proposals are validated in order until that many pass.
    When every proposal is rejected, the node is asked again (up to `reasks` times, within
    the budget) rather than given up with the budget unspent.
    """
    if ctx.stopped or node_id in ctx.expanded:
        return []
    ctx.expanded.add(node_id)
    ctx.counts.expansions += 1
    children: list[int] = []
    priors: dict[int, float] = {}
    revotes = False
    for attempt in range(1 + ctx.config.reasks):
        if attempt:
            ctx.counts.reasks += 1
        got = await generate(ctx, node_id, attempt)
        if got is None:
            return []
        added, rejected, revoted = _add_children(ctx, node_id, got)
        revotes = revotes or bool(revoted)
        if got.odds:  # only a scored choice among the task's steps gives priors
            for child, raw in added:
                prior = got.prior(raw)
                if prior is not None:
                    priors[child] = prior
        children += [child for child, _ in added]
        if children or not rejected or ctx.stopped:
            break
    if revotes and not children:
        # Only programs sampled before: no new thought, but more votes for them (a task that counts whole answers).
        await _tally(ctx, node_id, [])
        return []
    await evaluate(ctx, node_id, children, priors)
    node = ctx.graph.node
    return [c for c in children if node(c).status is _S.SUCCEEDED]


async def widen(ctx: SearchContext, node_id: int, times: int) -> list[int]:
    """More children for a thought expanded already; its new scored children (none: it has no more).

    Where the model ranked the task's valid steps, the next `breadth` of them (the same call, so
    the cache answers it at no cost); otherwise new samples, hotter and with a seed of their own.
    times: how many times this thought has been widened, this one included.
    """
    if ctx.stopped:
        return []
    ctx.counts.expansions += 1
    query = _generation_query(ctx, node_id)
    # Free-text steps: the first call's samples are the children made already; a re-ask's
    # attempts are numbered up to `reasks`, so a widening's seed is one none of them had.
    chooses = bool(query.choices) and ctx.scores_choices
    got = await generate(ctx, node_id, 0 if chooses else ctx.config.reasks + times)
    if got is None:
        return []
    added, _, revoted = _add_children(ctx, node_id, got, skip_children=True)
    priors = {child: prior for child, raw in added if (prior := got.prior(raw)) is not None}
    children = [child for child, _ in added]
    if revoted and not children:
        # Only repeats: no new thought, but more votes for the ones they repeat (a task that tallies). Those
        # their test failed gain nothing by it: a model that writes one failing program again and again has
        # given all it will here.
        await _tally(ctx, node_id, [])
        children = [n for n in revoted if (tested := ctx.grounding.get(n)) is None or tested.verified is not False]
    else:
        await evaluate(ctx, node_id, children, priors)
    node = ctx.graph.node
    return [c for c in children if node(c).status is _S.SUCCEEDED]


def _add_children(ctx: SearchContext, node_id: int, proposals: Proposals,
                  skip_children: bool = False) -> tuple[list[tuple[int, str]], int, list[int]]:
    """Validate proposals in order and add the first `breadth` new ones.

    Returns each child with the proposal it came from, how many proposals were rejected, and the
    children already there that were sampled again (counted as votes where the task tallies them).
    skip_children: proposals that are already children of the node are passed over silently (a
    widening goes past them), not counted as duplicates.
    """
    thoughts, cost = proposals.thoughts, proposals.cost
    task, problem = ctx.task, ctx.problem
    validate, state_key, seen = task.validate, task.state_key, ctx.seen  # once per call: this loop runs per thought
    validates = ctx.task_validates
    steps = ctx.steps(node_id)
    share = cost // max(1, len(thoughts))
    parents = (node_id,)
    children: list[tuple[int, str]] = []
    revoted: list[int] = []
    breadth = ctx.breadth
    # Where every thought is a whole answer the task counts, a program sampled again anywhere is one more vote for it.
    whole_tally = ctx.task_tallies and task.whole_answers
    proposed = rejected = 0
    for raw in thoughts:
        if len(children) >= breadth:
            break
        proposed += 1
        thought, note = raw, None
        if validates:
            verdict = validate(problem, steps, raw)
            if not verdict.ok:
                rejected += 1
                ctx.reject(node_id, raw, verdict.note or "rejected by the task's validator", "generate")
                continue
            thought, note = verdict.thought, verdict.note if verdict.repaired else None
        path = steps + (thought,)
        key = state_key(problem, path)
        times = proposals.times[raw] if proposals.times else 1
        if key in seen and (skip_children and node_id in ctx.graph.parents(seen[key]) or whole_tally):
            proposed -= 1
            if ctx.task_tallies:  # sampled again: more votes for the sibling (any answer, for whole answers) it repeats
                _sampled(ctx, seen[key], times)
                revoted.append(seen[key])
            continue
        if key in seen and ctx.merge_duplicate(node_id, key):
            continue
        child = ctx.add_thought(parents, thought, "generate", cost_tokens=share, note=note, steps=path)
        if child is None:
            break
        if times > 1:
            _sampled(ctx, child, times - 1)
        seen[key] = child
        children.append((child, raw))
    ctx.counts.proposed += proposed
    return children, rejected, list(dict.fromkeys(revoted))


def _sampled(ctx: SearchContext, node_id: int, more: int) -> None:
    """Count `more` samples beyond the first that gave this thought (node.extra["samples"])."""
    extra = ctx.graph.node(node_id).extra
    extra[EXTRA.samples] = extra.get(EXTRA.samples, 1) + more


async def evaluate(ctx: SearchContext, parent_id: int, node_ids: Sequence[int],
                   priors: dict[int, float] | None = None) -> None:
    """Score new thoughts: each on its own (value), siblings against each other (vote), or by how
    likely the model found each step when it chose among the task's valid steps (prior).

    prior scores no call; states the task values exactly keep their exact value, and thoughts
    without a prior (the backend could not score the choices) are valued as with `value`.
    A user's scorer (search/scorer.py) stands in for all three.
    """
    if not node_ids:
        return
    if ctx.user_scorer is not None:
        await value_many(ctx, node_ids)
        return
    evaluation = ctx.config.evaluation
    if evaluation == "vote":
        await _vote(ctx, parent_id, node_ids)
        return
    if evaluation == "prior" and priors:
        task, problem = ctx.task, ctx.problem
        scored: list[tuple[int, float]] = []
        rest: list[int] = []
        for node_id in node_ids:
            exact = task.exact_value(problem, ctx.steps(node_id))
            if exact is not None:
                scored.append((node_id, exact))
            elif node_id in priors:
                scored.append((node_id, priors[node_id]))
            else:
                rest.append(node_id)
        await settle_scores(ctx, scored)
        node_ids = rest
    await value_many(ctx, node_ids)


async def value(ctx: SearchContext, node_id: int, *, rescore: bool = False) -> None:
    """Score one thought: exactly when the task can, otherwise by sampled value prompts.

    rescore: value an already scored thought again (with the current number of samples).
    """
    await value_many(ctx, [node_id], rescore=rescore)


async def value_many(ctx: SearchContext, node_ids: Sequence[int], *, rescore: bool = False) -> None:
    """Score several thoughts with their value prompts in one batch (or concurrently)."""
    task, problem = ctx.task, ctx.problem
    asking: list[int] = []
    paths: list[tuple[str, ...]] = []
    exact_scores: list[tuple[int, float]] = []
    steps_of, set_status = ctx.steps, ctx.graph.set_status
    # A task without exact values is not asked for one per thought.
    exact_value = task.exact_value if ctx.task_values_exactly else None
    for node_id in node_ids:
        steps = steps_of(node_id)
        if exact_value is not None:
            exact = exact_value(problem, steps)
            if exact is not None:
                exact_scores.append((node_id, exact))
                continue
        asking.append(node_id)
        paths.append(steps)
    if exact_scores:
        await settle_scores(ctx, exact_scores)
    if not asking:
        return
    if ctx.user_scorer is not None:
        await _user_scores(ctx, ctx.user_scorer, asking, paths)
        return
    n = ctx.value_samples
    queries = [task.value(problem, steps) for steps in paths]
    keys = [(steps, n) if rescore else steps for steps in paths]

    def under_way(ids: Sequence[int]) -> None:
        # Marked only when a call waits: no other coroutine can see a thought whose call is answered at once.
        if not rescore:
            for node_id in ids:
                set_status(node_id, _S.IN_PROGRESS)

    if len(asking) > 1 and ctx.gateway.batches:
        under_way(asking)
        answers = await ctx.ask_many(queries, n, "evaluate", keys, EVALUATOR)
        scores = [_take_value(ctx, *args, rescore) for args in zip(asking, paths, queries, answers, strict=True)]
        await settle_scores(ctx, [(node_id, s) for node_id, s in zip(asking, scores, strict=True) if s is not None])
        return

    async def one(node_id: int, steps: tuple[str, ...], query: Query, key: object,
                  started: Later[Answer | None] | None = None) -> None:
        # Each score lands as soon as its call returns: a goal found first stops the calls not yet made.
        got = await (ctx.ask(query, n, "evaluate", key, EVALUATOR) if started is None else started)
        score = _take_value(ctx, node_id, steps, query, got, rescore)
        if score is None:
            return
        if ctx.grounders:
            await settle_scores(ctx, [(node_id, score)])
        else:  # settle_scores without its coroutine: this runs once per valued thought
            ctx.set_scores(((node_id, score),))

    items = list(zip(asking, paths, queries, keys, strict=True))
    if ctx.grounders:  # groundings overlap, each in its thought's own coroutine
        under_way(asking)
        await eager_gather(one(*item) for item in items)
        return
    # The hot loop of a search: a call answered at once is scored at once, with no coroutine
    # of its own. The first call that waits, and every one after it, run concurrently.
    score_one = ctx.scorer()
    for i, (node_id, steps, query, key) in enumerate(items):
        got = ctx.ask_now(query, n, "evaluate", key, EVALUATOR)
        if type(got) is Later:
            under_way(asking[i:])
            await eager_gather([one(node_id, steps, query, key, got), *(one(*item) for item in items[i + 1:])])
            return
        score = _take_value(ctx, node_id, steps, query, got, rescore)  # type: ignore[arg-type]
        if score is not None:
            score_one(node_id, score)


async def _user_scores(ctx: SearchContext, scorer: ThoughtScorer, node_ids: Sequence[int],
                       paths: Sequence[tuple[str, ...]]) -> None:
    """Score thoughts by the user's scorer, no model call; its reasoning is kept as the thought's evaluation."""
    root = ctx.problem_text
    got = await eager_gather(scorer.score(steps[-1], (root, *steps)) for steps in paths)
    node = ctx.graph.node
    for node_id, scored in zip(node_ids, got, strict=True):
        if scored.reasoning:
            node(node_id).extra[EXTRA.evaluation] = Evaluation(scored.score, scored.reasoning).to_dict()
    await settle_scores(ctx, [(node_id, scored.score) for node_id, scored in zip(node_ids, got, strict=True)])


def _take_value(
    ctx: SearchContext, node_id: int, steps: tuple[str, ...], query: Query, got: Answer | None,
    rescore: bool,
) -> float | None:
    """The score the value replies give (None when the call was not made)."""
    task, problem = ctx.task, ctx.problem
    if got is None:
        if not rescore:
            ctx.cancel(node_id)
        return None
    texts, cost = got
    ctx.graph.node(node_id).cost_tokens += cost
    if query.choices and ctx.scores_choices:
        # The expected verdict under the model's distribution: each choice read as a reply of its own.
        odds = parse_choice_text(texts[0], query.choices)
        if odds is not None:
            return sum(p * task.parse_value(problem, steps, [c]) for c, p in odds.items())
        return task.parse_value(problem, steps, texts)
    if len(texts) > 1:
        # How much the samples disagree tells the controller whether the evaluator is reliable.
        singles = [task.parse_evaluation(problem, steps, [t]).score for t in texts]
        ctx.value_spreads.append(max(singles) - min(singles))
    if not ctx.task_explains:
        # The base parse_evaluation is parse_value's number alone: no Evaluation object per thought.
        return task.parse_value(problem, steps, texts)
    evaluation = task.parse_evaluation(problem, steps, texts)
    if evaluation.explained:
        # Kept on the node (and so in a stored run): why the evaluator scored it so, and whether
        # it found the thought worth expanding (the tree_of_thoughts strategy prunes on that).
        ctx.graph.node(node_id).extra[EXTRA.evaluation] = evaluation.to_dict()
    return evaluation.score


async def settle_scores(ctx: SearchContext, scores: Sequence[tuple[int, float]]) -> None:
    """Ground the scored thoughts (when grounders are configured), then record their scores."""
    if ctx.grounders:
        if len(scores) == 1:
            adjusted = [await ctx.ground(*scores[0])]
        else:
            adjusted = await eager_gather(ctx.ground(n, s) for n, s in scores)
        # A thought whose grounding the wall-clock deadline cut off stays unscored (cancelled at the end).
        scores = [(n, a) for (n, _), a in zip(scores, adjusted, strict=True) if a is not None]
    ctx.set_scores(scores)


async def _vote(ctx: SearchContext, parent_id: int, node_ids: Sequence[int]) -> None:
    task, problem = ctx.task, ctx.problem
    if ctx.task_tallies and await _tally(ctx, parent_id, node_ids):
        return
    if len(node_ids) == 1:
        await settle_scores(ctx, [(node_ids[0], 1.0)])  # a vote with one candidate needs no call
        return
    candidates = [ctx.graph.node(n).content for n in node_ids]
    for n in node_ids:
        ctx.graph.set_status(n, _S.IN_PROGRESS)
    steps = ctx.steps(parent_id)
    got = await ctx.ask(task.vote(problem, steps, candidates), ctx.config.vote_samples, "evaluate", (steps, candidates),
                        EVALUATOR)
    if got is None:
        for n in node_ids:
            ctx.cancel(n)
        return
    texts, cost = got
    shares = task.parse_vote(problem, candidates, texts)
    for n in node_ids:
        ctx.graph.node(n).cost_tokens += cost // len(node_ids)
    await settle_scores(ctx, list(zip(node_ids, shares, strict=False)))


#: The thoughts a whole-answer count takes in: scored ones (pruned too: they were sampled) and those being scored.
_TALLIED = frozenset({_S.SUCCEEDED, _S.PRUNED, _S.IN_PROGRESS})


async def _tally(ctx: SearchContext, parent_id: int, node_ids: Sequence[int]) -> bool:
    """The task's own count of agreement among all the parent's children as the vote, the new
    ones (node_ids) and the earlier ones re-scored with them; False when the task leaves it to the model.

    Where every thought is a whole answer (a program), the count is over every thought of the
    graph, at any depth: a revision and a fresh sample are both candidate answers.
    """
    graph = ctx.graph
    for n in node_ids:
        graph.set_status(n, _S.IN_PROGRESS)
    if ctx.task.whole_answers:
        everyone = [n.id for n in graph if n.id != ctx.root and n.status in _TALLIED]
    else:
        everyone = [c for c in graph.children(parent_id) if graph.node(c).status is not _S.FAILED]
    if ctx.grounders:
        # Each thought is tested first, on its own under the wall-clock budget: one whose test the deadline cut
        # off stays out of the count (and unscored) rather than holding up the others; the task's count then
        # reads what the tests found (the code task's runs are shared with its grounder).
        checked = await eager_gather(ctx.check(n) for n in everyone)
        everyone = [n for n, ok in zip(everyone, checked, strict=True) if ok]
    thoughts = [Sampled(graph.node(c).content, graph.node(c).extra.get(EXTRA.samples, 1)) for c in everyone]
    tally = await ctx.task.tally(ctx.problem, ctx.steps(parent_id), thoughts)
    if tally is None:
        return False
    # An agreement the task counted is a goal as a passed test is: the score alone does not decide it.
    ctx.prove_goals(everyone[i] for i in tally.agreed)
    for node_id, note in zip(everyone, tally.notes, strict=False):
        graph.node(node_id).extra[EXTRA.tally] = note
    await settle_scores(ctx, list(zip(everyone, tally.shares, strict=False)))
    return True


async def aggregate(ctx: SearchContext, node_ids: Sequence[int]) -> int | None:
    """Merge several thoughts into one new node whose parents are all of them."""
    paths = [ctx.steps(n) for n in node_ids]
    query = ctx.task.aggregate(ctx.problem, paths)
    return await _rewrite(ctx, query, "aggregate", paths, node_ids, NodeKind.SYNTHESIS, EdgeKind.AGGREGATION,
                          SYNTHESIZER)


async def refine(ctx: SearchContext, node_id: int) -> int | None:
    """Improve a thought given feedback on its score; the result is a new child node."""
    node = ctx.graph.node(node_id)
    steps = ctx.steps(node_id)
    feedback = f"An evaluator scored this {node.score:.2f} out of 1. Fix its weaknesses and make it more complete."
    query = ctx.task.refine(ctx.problem, steps, feedback)
    return await _rewrite(ctx, query, "refine", steps, [node_id], node.kind, EdgeKind.REFINEMENT, GENERATOR)


async def _rewrite(
    ctx: SearchContext, query: Query, purpose: str, key: object,
    parents: Sequence[int], kind: NodeKind, edge_kind: EdgeKind, role: str,
) -> int | None:
    """One call (in `role`) whose reply stands in for the parents' last step (a merge or a refinement), valued."""
    got = await ctx.ask(query, 1, purpose, key, role)
    if got is None:
        return None
    texts, cost = got
    thought = ctx.task.parse_thought(ctx.problem, texts[0])
    if thought is None:
        return None
    nid = ctx.add_thought(
        list(parents), thought, purpose, kind=kind, edge_kind=edge_kind, cost_tokens=cost, replaces_last=True
    )
    if nid is not None:
        await value(ctx, nid)
    return nid


async def synthesize(ctx: SearchContext, node_id: int) -> tuple[str | None, int | None]:
    """The final answer from the path ending at node_id, added to the graph as a solution node."""
    task, problem = ctx.task, ctx.problem
    steps = ctx.steps(node_id)
    reply: str | None = None
    query = task.synthesize(problem, steps) if steps else None
    if query is not None:
        saved, ctx.stop_reason = ctx.stop_reason, None  # the final call is allowed after a stop
        try:
            got = await ctx.ask(query, 1, "synthesize", steps, SYNTHESIZER)
        finally:
            ctx.stop_reason = saved if saved is not None else ctx.stop_reason
        if got is not None:
            reply = got[0][0]
    answer = task.compose_answer(problem, steps, reply)
    if answer is None:
        return None, None
    return answer, ctx.add_solution(node_id, answer)
