"""The built-in processors, one per node kind: input, plan, question, hypothesis, decomposition,
evidence (a tool call), analysis, code, critique, synthesis and solution; and, for a question about
numbers, program (one computation by the python tool), expression (one by the calculator) and vote
(the answer the computations agree on)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ...graph import EdgeKind, Node, NodeKind
from ...grounding.arith import ExpressionError, evaluate, fmt
from ...grounding.code import extract_code
from ...grounding.programs import last_line, program_text
from ...tasks.agent import (
    Context,
    PlanStep,
    ToolCallError,
    check_plan,
    code_query,
    critique_query,
    decompose_query,
    hypothesis_query,
    native_tool_query,
    parse_critique,
    parse_native_tool_call,
    parse_plan,
    parse_tool_call,
    plan_query,
    revise_query,
    step_query,
    synthesis_query,
    tool_query,
)
from ...tasks.base import Query, one_line
from ...tasks.hops import bridge_of, hop_names, hop_query, hop_search
from ...tasks.math import Ballot, canonical, count_votes, expression_query, is_math_question, program_query
from ...tasks.recursion.contract import ChildSpec
from ...tools.base import ToolResult
from ...tools.builtin import plain_arithmetic, program_stdout
from .processors import (
    EXTRA,
    AgentEnv,
    NewEdge,
    NewNode,
    ProcessorRegistry,
    ProcessorResult,
    failed,
    kind_of,
    succeeded,
)

#: Tool names that do a step by running code rather than by being asked for arguments.
CODE_TOOL = "python"
DOCS_TOOL = "docs"
CALC_TOOL = "calc"
#: Kinds of a question about numbers: a program (or an expression for the calculator) that computes its
#: answer, and the vote on the answers.
PROGRAM_KIND = "program"
EXPRESSION_KIND = "expression"
VOTE_KIND = "vote"
#: Independent computations of a question about numbers a round (as many as the math task samples a round),
#: and the most rounds while no answer has a quorum.
COMPUTE_SAMPLES = 5
COMPUTE_ROUNDS = 3


def _no_model(purpose: str) -> ProcessorResult:
    return failed(f"no model reply for the {purpose} (budget or model stopped the run)")


class InputProcessor:
    """The task itself: a plan of steps; for a question with document search granted, one question; for a
    question about numbers with python or calc granted, independent computations and a vote on their results."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Ask for a plan (or pose the task as a question to research, or to compute)."""
        question = env.task.rstrip().endswith("?")
        if question and DOCS_TOOL in env.tools:
            return succeeded(env.task, result={"mode": "question"}, new_nodes=(
                NewNode("question", env.task, (node.id,)),
                NewNode("solution", "Final answer", ("@0",)),
            ))
        if question and is_math_question(env.task) and (CODE_TOOL in env.tools or CALC_TOOL in env.tools):
            return succeeded(env.task, result={"mode": "compute"}, new_nodes=compute_nodes(node.id, env.tools.names))
        got = await env.ask(plan_query(env.task, env.tools.names), "plan", node.id)
        if got is None:
            return _no_model("plan")
        reply, tokens = got
        steps = parse_plan(reply, env.tools.names)
        if not steps:
            return failed("the model's reply held no numbered plan", cost_tokens=tokens, result={"reply": reply})
        text = "\n".join(f"{s.number}. " + (f"[{s.tool}] " if s.tool else "") + s.text
                         + (f" (after {', '.join(map(str, s.after))})" if s.after else "") for s in steps)
        return succeeded(text, cost_tokens=tokens, result={"mode": "plan"}, new_nodes=(
            NewNode("plan", text, (node.id,), data={EXTRA.steps: [s.to_dict() for s in steps]}),
        ))


def compute_nodes(task_node: int, tools: Sequence[str]) -> tuple[NewNode, ...]:
    """A question about numbers as COMPUTE_SAMPLES independent computations (programs run by the python
    tool, else expressions for the calculator), the vote on what they printed, and the solution.

    A small model that reasons in prose gets the sums wrong and its own check agrees with it: here
    every number comes from a tool, and the answer from agreement between computations.
    """
    return (*compute_round(task_node, tools), NewNode("solution", "Final answer", (f"@{COMPUTE_SAMPLES}",)))


def compute_round(task_node: int, tools: Sequence[str], earlier: tuple[int, ...] = (),
                  number: int = 1) -> tuple[NewNode, ...]:
    """One round: COMPUTE_SAMPLES computations and a vote over them and the `earlier` ones."""
    if CODE_TOOL in tools:
        work = [NewNode(PROGRAM_KIND, "Compute the answer with a program", (task_node,), base=NodeKind.CODE,
                        data={EXTRA.sample: i + 1, EXTRA.tool: CODE_TOOL}) for i in range(COMPUTE_SAMPLES)]
    else:
        work = [NewNode(EXPRESSION_KIND, "Compute the answer with one arithmetic expression", (task_node,),
                        base=NodeKind.EVIDENCE, data={EXTRA.sample: i + 1, EXTRA.tool: CALC_TOOL})
                for i in range(COMPUTE_SAMPLES)]
    vote = NewNode(VOTE_KIND, "Vote on the computed answers", (*earlier, *(f"@{i}" for i in range(COMPUTE_SAMPLES))),
                   base=NodeKind.SYNTHESIS, data={EXTRA.round: number})
    return (*work, vote)


def step_kind(step: PlanStep) -> str:
    """The kind a plan step is worked as: evidence for a tool, code for python, question, else analysis."""
    if step.tool == CODE_TOOL:
        return "code"
    if step.tool is not None:
        return "evidence"
    return "question" if step.text.rstrip().endswith("?") else "analysis"


class PlanProcessor:
    """A plan's steps as nodes with their dependencies, then synthesis, critique and solution."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Turn the plan into nodes; a plan whose dependencies form a cycle is refused with the reason."""
        steps = [PlanStep(int(s["number"]), str(s["text"]), tuple(int(a) for a in s.get("after") or ()),
                          s.get("tool")) for s in node.extra.get(EXTRA.steps) or ()]
        if not steps:
            return failed("the plan has no steps")
        why = check_plan(steps)
        if why is not None:
            return failed(f"plan refused: {why}")
        index = {s.number: i for i, s in enumerate(steps)}
        new: list[NewNode] = []
        for s in steps:
            after: tuple[int | str, ...] = (node.id, *(f"@{index[a]}" for a in s.after))
            data: dict[str, Any] = {EXTRA.step: s.number}
            if s.tool is not None:
                data[EXTRA.tool] = s.tool
            new.append(NewNode(step_kind(s), s.text, after, data=data))
        synth = len(new)
        # The synthesis reads every step's result, not only the last ones.
        new.append(NewNode("synthesis", "Put the results together into one answer",
                           tuple(f"@{i}" for i in range(len(steps)))))
        new.append(NewNode("critique", "Check the answer against the task", (f"@{synth}",)))
        new.append(NewNode("solution", "Final answer", (f"@{synth}", f"@{synth + 1}")))
        return succeeded(node.content, new_nodes=tuple(new), result={"steps": len(steps)})


class AnalysisProcessor:
    """Carry out a step by reasoning over its parents' results."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """One model call for the step's result."""
        got = await env.ask(step_query(env.task, node.content, env.context(node)), kind_of(node), node.id)
        if got is None:
            return _no_model(kind_of(node))
        reply, tokens = got
        text = reply.strip()
        if not text:
            return failed("the model's reply was empty", cost_tokens=tokens)
        return succeeded(text, cost_tokens=tokens)


class EvidenceProcessor:
    """Gather evidence with a tool: document search by the step's words, any other tool with model-chosen arguments."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Call the step's tool (asking the model for its arguments when they are not the step itself)."""
        tool = node.extra.get(EXTRA.tool) or (DOCS_TOOL if DOCS_TOOL in env.tools else None)
        if tool is None or tool not in env.tools:
            return failed(f"the step needs the {tool or 'a'} tool, which was not granted (--tools)")
        if tool == DOCS_TOOL:
            result = await env.call_tool(DOCS_TOOL, {"query": node.content}, node.id)
            return _tool_outcome(result, 0)
        spec = env.tools.spec(tool)
        assert spec is not None
        context = env.context(node)
        tokens = 0
        feedback = ""
        # The endpoint's function calling where the backend takes it (see docs/agent.md), else a JSON reply.
        native = env.native_tools
        ask, parse = (native_tool_query, parse_native_tool_call) if native else (tool_query, parse_tool_call)
        for _ in range(2):  # one retry, told what was wrong with the first call
            got = await env.ask(ask(env.task, node.content + feedback, context, [spec]), "tool_choice", node.id)
            if got is None:
                return _no_model("tool choice")
            reply, used = got
            tokens += used
            try:
                choice = parse(reply, {spec.name: spec})
            except ToolCallError as exc:
                env.counts["malformed_tool_calls"] += 1
                feedback = f"\n(Your last reply was not a call: {exc}.)"
                continue
            return _tool_outcome(await env.call_tool(choice.tool, choice.args, node.id), tokens)
        return failed(f"no valid {tool} call after 2 tries{feedback}", cost_tokens=tokens,
                      result={"malformed": True})


def _tool_outcome(result: ToolResult, tokens: int) -> ProcessorResult:
    record = (result.to_dict(),)
    if not result.ok:
        return failed(f"{result.tool}: {result.status}: {result.error}", cost_tokens=tokens, tool_calls=record)
    return succeeded(result.output, cost_tokens=tokens, tool_calls=record, result={"tool": result.tool})


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class QuestionProcessor:
    """Answer a question: from searched documents when document search is granted, else from the parents' results.

    A question with a required answer type (a decomposition's child) fails when its answer does
    not have that type.
    """

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Search (when granted; a bridge question searches again for the entity its passages name), then one model
        call for the answer from every passage found."""
        context = env.context(node)
        calls: list[Any] = []
        hops: list[dict[str, Any]] = []
        tokens = 0
        if DOCS_TOOL in env.tools:
            found = await env.call_tool(DOCS_TOOL, {"query": node.content}, node.id)
            calls.append(found.to_dict())
            if found.ok:
                context = Context((*context.items, ("documents", found.output)))
                bridge = await follow_bridge(env, node.content, parse_passages(found.output),
                                             env.ctx.config.bridge_hops, node.id,
                                             lambda query: env.ask(query, "hop", node.id))
                tokens, hops = bridge.tokens, bridge.record
                for name, result in bridge.found:
                    calls.append(result.to_dict())
                    if result.ok:
                        context = Context((*context.items, (f"documents about {name}", result.output)))
        got = await env.ask(step_query(env.task, f"Answer in a few words (a name, a number, yes or no): "
                                              f"{node.content}", context), "question", node.id)
        if got is None:
            return _no_model("question")
        reply, used = got
        tokens += used
        text = reply.strip()
        spec = node.extra.get(EXTRA.spec)
        if spec is not None:
            value: Any = text
            if spec.get("type") in ("number", "integer"):
                m = _NUMBER.search(text)
                value = None if m is None else float(m.group().replace(",", ""))
                if value is not None and spec.get("type") == "integer" and value.is_integer():
                    value = int(value)
            why = ChildSpec(type=spec.get("type", "text")).check(value)
            if why is not None:
                return failed(f"the answer breaks its contract: {why}", cost_tokens=tokens, tool_calls=tuple(calls))
        return succeeded(text, cost_tokens=tokens, tool_calls=tuple(calls), result={"hops": hops} if hops else {})


def parse_passages(output: str) -> list[tuple[str, str]]:
    """The docs tool's answer as (docs:FILE:LINES, text) pairs."""
    out = []
    for chunk in output.strip().split("\n\n"):
        head, _, text = chunk.partition("\n")
        number, dot, ref = head.partition(". ")
        if dot and number.strip().isdigit() and ref.strip() and text.strip():
            out.append((f"docs:{ref.strip()}", text.strip()))
    return out


#: The naming call of a bridge question's hop: query -> (reply, tokens), or None when no reply came.
HopAsk = Callable[[Query], Awaitable[tuple[str, int] | None]]


@dataclass(slots=True)
class BridgeHops:
    """A bridge question's follow-up searches: each name searched with the search's result, what the hops did
    (the name searched and how it was found, or why none was), and the tokens the naming call spent."""

    found: list[tuple[str, ToolResult]] = field(default_factory=list)
    record: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0


async def follow_bridge(env: AgentEnv, question: str, passages: Sequence[tuple[str, str]], hops: int, node_id: int,
                        ask: HopAsk, limit: int | None = None) -> BridgeHops:
    """At most `hops` follow-up document searches for the entity a bridge question's first passages name (one
    model call names it; tasks/hops finds it without one when the reply does not), for the agent and research."""
    out = BridgeHops()
    if hops <= 0:
        return out
    bridge = bridge_of(question)
    if bridge is None or not passages:
        out.record.append({"name": None, "how": "not a bridge question" if bridge is None else "no first passages"})
        return out
    got = await ask(hop_query(bridge, passages))
    out.tokens = 0 if got is None else got[1]
    plan = hop_names(bridge, passages, None if got is None else got[0])
    if not plan.names:
        out.record.append({"name": None, "how": plan.why_none})
    for name, how in plan.names[:hops]:
        if env.ctx.stopped:
            break
        args: dict[str, Any] = {"query": hop_search(bridge, name)}
        if limit is not None:
            args["limit"] = limit
        out.found.append((name, await env.call_tool(DOCS_TOOL, args, node_id)))
        out.record.append({"name": name, "how": how})
    return out


class HypothesisProcessor:
    """State a hypothesis and put it up for critique."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """One model call for the hypothesis; a critique node is added below it."""
        got = await env.ask(hypothesis_query(env.task, node.content, env.context(node)), "hypothesis", node.id)
        if got is None:
            return _no_model("hypothesis")
        reply, tokens = got
        return succeeded(reply.strip(), cost_tokens=tokens,
                         new_nodes=(NewNode("critique", "Test the hypothesis", (node.id,)),))


_TYPED = re.compile(r"\((number|integer|text)\)\s*\.?\s*$", re.IGNORECASE)


class DecompositionProcessor:
    """Split a question into typed sub-questions (the recursive solver's child contracts), then recompose them."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """One model call for the sub-questions; they and a synthesis over them are added."""
        got = await env.ask(decompose_query(env.task, node.content), "decompose", node.id)
        if got is None:
            return _no_model("decomposition")
        reply, tokens = got
        subs = parse_plan(reply)
        if len(subs) < 2:
            return failed("the decomposition gave fewer than two sub-questions", cost_tokens=tokens)
        new: list[NewNode] = []
        for s in subs:
            m = _TYPED.search(s.text)
            kind = m.group(1).lower() if m else "text"
            text = s.text[: m.start()].rstrip() if m else s.text
            new.append(NewNode("question", text, (node.id,), data={EXTRA.spec: {"type": kind}, EXTRA.step: s.number}))
        new.append(NewNode("synthesis", f"Recompose the answers to: {node.content}",
                           tuple(f"@{i}" for i in range(len(subs)))))
        return succeeded(reply.strip(), cost_tokens=tokens, new_nodes=tuple(new),
                         result={"children": len(subs)})


class CodeProcessor:
    """Write a program for the step and run it in the sandbox (the python tool); one retry with the error."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Generate, run, and keep what the sandboxed program printed."""
        if CODE_TOOL not in env.tools:
            return failed("the step needs the python tool, which was not granted (--tools python)")
        context, tokens, calls, feedback = env.context(node), 0, [], None
        for _ in range(2):
            got = await env.ask(code_query(env.task, node.content, context, feedback), "code", node.id)
            if got is None:
                return _no_model("code")
            reply, used = got
            tokens += used
            code = extract_code(reply)
            if not code:
                env.counts["malformed_tool_calls"] += 1
                feedback = "the reply held no code block"
                continue
            result = await env.call_tool(CODE_TOOL, {"code": code}, node.id)
            calls.append(result.to_dict())
            if result.ok:
                return succeeded(result.output.strip() or "(the program printed nothing)", cost_tokens=tokens,
                                 tool_calls=tuple(calls), result={"code": code})
            feedback = result.error or result.status
        return failed(f"the program failed: {feedback}", cost_tokens=tokens, tool_calls=tuple(calls))


@dataclass(frozen=True, slots=True)
class ComputeProcessor:
    """One computation of the task's answer: the model writes what a tool runs (a program for python, an
    expression for calc), the tool computes, and the node's answer is read from the tool's output only."""

    tool: str
    #: What the model writes ("program", "expression"): the call's purpose and the word in errors.
    writes: str
    query: Callable[[str], Query]
    #: The tool's argument from the model's reply, and the answer from the tool's output (None: none).
    argument: Callable[[str], dict[str, str]]
    answer: Callable[[str], str | None]

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Ask for the program or expression, have the tool run it, keep the answer it computed."""
        if self.tool not in env.tools:
            return failed(f"the step needs the {self.tool} tool, which was not granted (--tools {self.tool})")
        got = await env.ask(self.query(env.task), self.writes, node.id)
        if got is None:
            return _no_model(self.writes)
        reply, tokens = got
        args = self.argument(reply)
        if not any(v.strip() for v in args.values()):
            env.counts["malformed_tool_calls"] += 1
            return failed(f"the reply held no {self.writes}", cost_tokens=tokens)
        result = await env.call_tool(self.tool, args, node.id)
        calls = (result.to_dict(),)
        if not result.ok:
            return failed(f"the {self.writes} failed: {result.error or result.status}", cost_tokens=tokens,
                          tool_calls=calls)
        answer = self.answer(result.output)
        if answer is None:
            return failed(f"the {self.writes} gave no answer: {one_line(result.output, 120)}", cost_tokens=tokens,
                          tool_calls=calls)
        return succeeded(answer, cost_tokens=tokens, tool_calls=calls, result={**args, "answer": answer})


def printed_answer(output: str) -> str | None:
    """A program's answer from the python tool's output: the last line it printed, as the math task reads it."""
    return canonical(last_line(program_stdout(output)))


_CALC_VALUE = re.compile(r"=\s*(-?[\d/.]+)\s*(?:\((≈?)(-?[\d.]+)\))?\s*$")


def calculated_answer(output: str) -> str | None:
    """The calculator's value, as a decimal when it has one ("10/4 = 5/2 (2.5)" -> "2.5")."""
    m = _CALC_VALUE.search(output.split(";", 1)[0].strip())
    return None if m is None else canonical(m.group(3) or m.group(1))


def program_processor() -> ComputeProcessor:
    """A program for the answer (the math task's prompt), run by the python tool."""
    return ComputeProcessor(CODE_TOOL, "program", program_query, lambda reply: {"code": program_text(reply)},
                            printed_answer)


def expression_processor() -> ComputeProcessor:
    """An arithmetic expression for the answer (a prompt with no tool description to copy numbers from), run by calc."""
    return ComputeProcessor(CALC_TOOL, "expression", expression_query,
                            lambda reply: {"expression": reply.strip().strip("`").strip()}, calculated_answer)


class VoteProcessor:
    """The answer most computations gave (no model call), counted as the math task counts its programs (those that
    leave out numbers of the question count less): agreed when it has a quorum of votes and more than any other;
    until then, up to COMPUTE_ROUNDS rounds of computations."""

    #: No model call: it counts what the computations gave even after the budget stopped the run.
    after_stop = True

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Count the computed answers; the one with the most votes (the earliest of a tie) is the answer, its votes
        per answer given the score (a failed computation gives none; under "replan" its retry does)."""
        graph = env.ctx.graph
        ballots = [_ballot(graph.node(p)) for p in env.dependencies(node.id)]
        count = count_votes(env.task, ballots)
        answer = count.leader([b.answer for b in ballots])
        if answer is None:
            return failed(f"none of the {len(ballots)} computations gave an answer")
        given = sum(count.counts.values())
        tally = count.note(answer, "computations gave") + (
            "" if given == len(ballots) else f"; {len(ballots) - given} gave none")
        agreed = count.winner == answer
        number = int(node.extra.get(EXTRA.round, 1))
        # No quorum yet: another round, whose vote counts these computations too (the solution waits
        # for it); this vote's answer stands if the budget stops the run first.
        again = () if agreed or number >= COMPUTE_ROUNDS or env.ctx.stopped else compute_round(
            env.ctx.root, env.tools.names, tuple(env.dependencies(node.id)), number + 1)
        return succeeded(answer, score=count.votes[answer] / given, agreed=agreed, tally=tally, new_nodes=again,
                         result={"votes": dict(count.counts.most_common()), "computations": len(ballots),
                                 "agreed": agreed, "round": number})


def _ballot(node: Node) -> Ballot:
    """A computation node as a ballot: its answer (None when it failed) and the code it ran."""
    result = node.extra.get(EXTRA.result) or {}
    code = result.get("code") or result.get("expression") or ""
    answer = result.get("answer") if node.extra.get(EXTRA.status) == "succeeded" else None
    return Ballot(answer if isinstance(answer, str) else None, str(code))


# A number, and up to two unit words after it ("2 buses", "24.00 EUR"), as people write sums.
_QTY = r"-?\d[\d,]*(?:\.\d+)?(?:\s*[A-Za-z€$£]+){0,2}"
_CLAIM = re.compile(rf"((?:{_QTY}\s*[-+*/×÷x]\s*)+{_QTY})\s*=\s*(-?\d[\d,]*(?:\.\d+)?)")


def arithmetic_claims(text: str) -> list[tuple[str, str]]:
    """Written-out calculations ("3 x 120 = 360", "2 buses x 48 EUR = 96 EUR") as (expression, stated result) pairs."""
    return [(plain_arithmetic(m.group(1))[0], m.group(2).replace(",", "")) for m in _CLAIM.finditer(text)]


def _exact(expression: str) -> Fraction | None:
    try:
        value, _ = evaluate(expression)
    except (ExpressionError, ValueError, ZeroDivisionError, RecursionError):
        return None
    return value


def sum_error(expression: str, stated: str) -> str | None:
    """Why `expression = stated` is wrong ("2 * 48 is 96, not 112"); None when it is right or cannot be computed."""
    exact, said = _exact(expression), _exact(stated)
    if exact is None or said is None or exact == said:
        return None
    return f"{expression} is {fmt(exact)}, not {stated}"


def wrong_sums(text: str) -> list[str]:
    """Each written-out calculation in `text` whose stated result is not its exact value, said as such."""
    return [why for e, s in arithmetic_claims(text) if (why := sum_error(e, s)) is not None]


class CritiqueProcessor:
    """Judge the node it depends on: exact arithmetic checks first, then the model; a refutation labels the edge
    CONTRADICTION."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Check every written-out calculation exactly (with the calculator when granted), then ask the model."""
        deps = env.dependencies(node.id)
        if not deps:
            return failed("a critique needs the node it judges as a dependency")
        target = deps[0]
        answer = env.text(target)
        wrong: list[str] = []
        checks: list[str] = []
        calls: list[Any] = []
        for expression, stated in arithmetic_claims(answer):
            if CALC_TOOL in env.tools:
                r = await env.call_tool(CALC_TOOL, {"expression": f"{expression} = {stated}"}, node.id)
                calls.append(r.to_dict())
            why = sum_error(expression, stated)
            if why is not None:
                wrong.append(why)
            elif _exact(expression) is not None:
                checks.append(f"{expression} = {stated} is right")
        if wrong:
            verdict_data = {"refutes": True, "reasons": wrong, "confidence": 1.0, "by": "exact arithmetic"}
            return succeeded("; ".join(wrong), result=verdict_data, tool_calls=tuple(calls), score=0.0,
                             new_edges=(NewEdge(target, node.id, EdgeKind.CONTRADICTION, 1.0),))
        got = await env.ask(critique_query(env.task, answer, checks), "critique", node.id)
        if got is None:
            return _no_model("critique")
        reply, tokens = got
        verdict = parse_critique(reply)
        data = {**verdict.to_dict(), "by": "model", "checked": checks}
        edges = (NewEdge(target, node.id, EdgeKind.CONTRADICTION, verdict.confidence),) if verdict.refutes else ()
        return succeeded("; ".join(verdict.reasons) or ("refuted" if verdict.refutes else "ok"), result=data,
                         cost_tokens=tokens, tool_calls=tuple(calls), new_edges=edges,
                         score=1.0 - verdict.confidence if verdict.refutes else verdict.confidence)


class SynthesisProcessor:
    """Combine the results of several parents into one answer."""

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """One model call over all the parents' results."""
        context = env.context(node)
        if not context.items:
            return failed("nothing to put together: every step it depends on failed or gave nothing")
        got = await env.ask(synthesis_query(env.task, context), "synthesis", node.id)
        if got is None:
            return _no_model("synthesis")
        reply, tokens = got
        return succeeded(reply.strip(), cost_tokens=tokens) if reply.strip() else failed("empty synthesis",
                                                                                        cost_tokens=tokens)


class SolutionProcessor:
    """The final answer: the synthesis as it stands, or revised to fix what a critique refuted."""

    #: After a stop it takes the answer as it stands (a revision's model call is refused, so none is made).
    after_stop = True

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Take the answer it depends on; revise it once when a critique it depends on refutes it."""
        graph = env.ctx.graph
        answer_from = [p for p in env.dependencies(node.id) if kind_of(graph.node(p)) != "critique"]
        critiques = [p for p in env.dependencies(node.id) if kind_of(graph.node(p)) == "critique"]
        if not answer_from:
            return failed("a solution needs an answer to depend on")
        source = graph.node(answer_from[-1])
        if source.extra.get(EXTRA.status) != "succeeded":
            # Under "skip" and "replan" a failed node lets its dependents run: its content is a step's
            # description ("Put the results together ..."), never an answer.
            return failed(f"the {kind_of(source)} it depends on failed: {source.extra.get(EXTRA.error) or 'no result'}")
        answer = env.text(answer_from[-1])
        problems = [str(r) for c in critiques if (graph.node(c).extra.get(EXTRA.result) or {}).get("refutes")
                    for r in (graph.node(c).extra[EXTRA.result].get("reasons") or ["refuted"])]
        if not problems:
            # A vote's account travels with the answer it chose (the last round's vote, not the path's first).
            tally = source.extra.get(EXTRA.tally)
            return succeeded(answer, result={"revised": False}, tally=tally if isinstance(tally, str) else None,
                             agreed=source.extra.get(EXTRA.agreed) if isinstance(tally, str) else None)
        got = await env.ask(revise_query(env.task, answer, problems), "revise", node.id)
        if got is None:
            return succeeded(answer, result={"revised": False, "note": "kept unrevised: no model reply"})
        reply, tokens = got
        revised = reply.strip()
        if not revised or len(wrong_sums(revised)) > len(wrong_sums(answer)):
            # A revision that gets more sums wrong than the answer it fixes is not kept.
            return succeeded(answer, cost_tokens=tokens, result={"revised": False, "problems": problems,
                                                                 "rejected_revision": revised})
        return succeeded(revised, cost_tokens=tokens, result={"revised": True, "problems": problems})


def default_processors() -> ProcessorRegistry:
    """A registry with the built-in processor of every node kind."""
    registry = ProcessorRegistry()
    registry.update([
        (NodeKind.INPUT.value, InputProcessor()),
        (NodeKind.PLAN.value, PlanProcessor()),
        (NodeKind.QUESTION.value, QuestionProcessor()),
        (NodeKind.HYPOTHESIS.value, HypothesisProcessor()),
        (NodeKind.DECOMPOSITION.value, DecompositionProcessor()),
        (NodeKind.EVIDENCE.value, EvidenceProcessor()),
        (NodeKind.ANALYSIS.value, AnalysisProcessor()),
        (NodeKind.CODE.value, CodeProcessor()),
        (NodeKind.CRITIQUE.value, CritiqueProcessor()),
        (NodeKind.SYNTHESIS.value, SynthesisProcessor()),
        (NodeKind.SOLUTION.value, SolutionProcessor()),
    ])
    registry.register(PROGRAM_KIND, program_processor(), base=NodeKind.CODE)
    registry.register(EXPRESSION_KIND, expression_processor(), base=NodeKind.EVIDENCE)
    registry.register(VOTE_KIND, VoteProcessor(), base=NodeKind.SYNTHESIS)
    return registry
