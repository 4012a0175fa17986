"""`loom agent`: an open task worked as a plan of typed, dependent steps with tools (through the run layer)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import MAX_FANOUT, add_bridge_hops_option, positive_float, positive_int
from .solve import (
    add_control_options,
    add_model_option,
    add_output_options,
    add_retrieval_option,
    add_run_limits,
    cmd_solve,
)


def add_agent_parser(sub: Any) -> None:
    """Add `loom agent` and its options to loom's subparsers."""
    s = sub.add_parser(
        "agent", help="work an open task as a plan of steps with tools",
        description="Work TASK as a graph of typed steps (plan, evidence, analysis, code, critique, synthesis, "
        "solution): independent steps run in parallel, each when the steps it depends on are done, calling the "
        "tools you grant.")
    s.add_argument("problem", metavar="TASK", help='the task, e.g. "Plan a 3-day trip to Lisbon under 900 EUR"')
    add_model_option(s)
    t = s.add_argument_group("tools (only those granted; calc by default)")
    t.add_argument(
        "--tools",
        metavar="LIST",
        default="calc",
        help="tools the agent may call, comma-separated (default: calc, which reads and writes nothing): calc, "
        "python (sandboxed, no network), docs (--knowledge), "
        "files (--allow-read), mcp:NAME or mcp (servers in --mcp-config)",
    )
    t.add_argument("--mcp-config", metavar="FILE", help='MCP servers, JSON: {"mcpServers": {"NAME": {"command": ..., '
                   '"args": [...]} or {"url": ...}}}')
    t.add_argument("--knowledge", metavar="DIR", help="the documents the docs tool searches (.md/.txt)")
    t.add_argument("--knowledge-index", metavar="FILE", help="keep the --knowledge search index in this SQLite file")
    add_retrieval_option(t)
    t.add_argument("--allow-read", metavar="DIR", action="append", help="a folder the files tool may read (repeatable)")
    t.add_argument("--tool-timeout", type=positive_float("--tool-timeout", 3600), metavar="S",
                   help="seconds one tool call may take (default 30)")
    t.add_argument("--tool-output-cap", type=positive_int("--tool-output-cap"), metavar="CHARS",
                   help="characters of a tool's output kept (default 4000)")
    t.add_argument("--tool-concurrency", type=positive_int("--tool-concurrency", MAX_FANOUT), metavar="N",
                   help="tool calls in flight at once (default 2)")
    add_bridge_hops_option(t)
    a = s.add_argument_group("scheduling")
    a.add_argument("--parallel", type=positive_int("--parallel", MAX_FANOUT), metavar="N",
                   help="steps in progress at once (default 5)")
    a.add_argument("--order", choices=("breadth_first", "depth_first", "best_first"),
                   help="which ready step starts first (default breadth_first; the controller may switch it)")
    a.add_argument("--on-failure", choices=("replan", "skip", "fail"),
                   help="a failed step: replan (retry once, told the error; default), skip (its dependents go on), "
                   "fail (its dependents fail too)")
    add_run_limits(s)
    add_control_options(s)
    add_output_options(s)


def cmd_agent(args: argparse.Namespace) -> int:
    """Run the agent on TASK: a `loom solve` of the agent task with the agent strategy."""
    args.task, args.strategy = "agent", "agent"
    return cmd_solve(args)
