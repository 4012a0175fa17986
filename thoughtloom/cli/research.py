"""`loom research`, the research mode's command: hypotheses tested against documents, insights printed live."""

from __future__ import annotations

import argparse
from typing import Any

from .common import MAX_FANOUT, add_bridge_hops_option, count, positive_int, unit_float
from .solve import (
    add_control_options,
    add_model_option,
    add_output_options,
    add_retrieval_option,
    add_role_options,
    add_run_limits,
    cmd_solve,
)


def add_research_parser(sub: Any) -> None:
    """Add `loom research` and its options to loom's subparsers."""
    from ..search.research.config import (
        ANTI_PATTERNS,
        BRANCH_STRATEGIES,
        EXPLORE_STRATEGIES,
        MERGE_STRATEGIES,
    )

    s = sub.add_parser(
        "research", help="research a question as a tree of hypotheses tested against documents",
        description="Research QUESTION: propose hypotheses, test each against the documents in --knowledge (or, "
        "without documents, the model's own claims, marked as such), branch where the evidence leaves doubt, prune, "
        "merge, and answer with a synthesis that cites its sources. Insights print as they are found.")
    s.add_argument("problem", metavar="QUESTION", help='the question, e.g. "Who directed Doctor Strange?"')
    s.add_argument("--knowledge", metavar="DIR", help="the documents (.md/.txt) hypotheses are tested against")
    s.add_argument("--knowledge-index", metavar="FILE", help="keep the --knowledge search index in this SQLite file")
    add_retrieval_option(s)
    add_model_option(s)
    t = s.add_argument_group("the tree (defaults: seed 004's)")
    t.add_argument("--max-branches", type=positive_int("--max-branches", MAX_FANOUT), metavar="N",
                   help="most children per hypothesis (default 5)")
    t.add_argument("--depth-limit", type=positive_int("--depth-limit", MAX_FANOUT), metavar="N",
                   help="deepest hypothesis level (default 4)")
    t.add_argument("--max-hypotheses", type=positive_int("--max-hypotheses"), metavar="N",
                   help="most hypotheses in the tree (default 100)")
    t.add_argument("--branching", choices=BRANCH_STRATEGIES, help="which hypotheses branch (default uncertainty)")
    t.add_argument("--branching-threshold", type=unit_float("--branching-threshold"), metavar="X",
                   help="uncertainty: branch below this confidence (default 0.3)")
    t.add_argument(
        "--explore", choices=EXPLORE_STRATEGIES, help="which hypothesis is explored next (default best_first)"
    )
    t.add_argument("--exploration-budget", type=positive_int("--exploration-budget"), metavar="N",
                   help="most hypothesis explorations (default 50)")
    t.add_argument("--parallel", dest="research_parallel", type=positive_int("--parallel", MAX_FANOUT), metavar="N",
                   help="hypotheses explored at once (default 3)")
    t.add_argument("--passages", type=positive_int("--passages", 10), metavar="N",
                   help="passages read per document search (default 3)")
    add_bridge_hops_option(t)
    p = s.add_argument_group("pruning and merging")
    p.add_argument("--pruning-threshold", type=unit_float("--pruning-threshold"), metavar="X",
                   help="prune below this promise (default 0.2)")
    p.add_argument("--prune-after-depth", type=count("--prune-after-depth", MAX_FANOUT), metavar="N",
                   help="prune from this depth down (default 1)")
    p.add_argument("--strong-evidence", type=unit_float("--strong-evidence"), metavar="X",
                   help="contradicting evidence this strong prunes (default 0.7)")
    p.add_argument("--merge", choices=MERGE_STRATEGIES, help="how hypotheses merge (default synthesis)")
    p.add_argument("--merge-threshold", type=positive_int("--merge-threshold", MAX_FANOUT), metavar="N",
                   help="merge when this many settled hypotheses stand at one depth (default 3)")
    e = s.add_argument_group("stopping")
    e.add_argument("--confidence-threshold", type=unit_float("--confidence-threshold"), metavar="X",
                   help="stop once the answer is this confident (default 0.9)")
    e.add_argument("--insight-target", type=positive_int("--insight-target"), metavar="N",
                   help="stop after this many insights")
    e.add_argument("--allow", action="append", choices=ANTI_PATTERNS, metavar="ANTI_PATTERN",
                   help=f"run a setting seed 004 calls an anti-pattern anyway: {', '.join(ANTI_PATTERNS)} (repeatable)")
    add_role_options(s, {
        "brancher": "proposes the hypotheses",
        "evaluator": "judges the passages (or claims) for each hypothesis",
        "synthesizer": "merges hypotheses into the answer",
    })
    add_run_limits(s)
    add_control_options(s)
    add_output_options(s)


def cmd_research(args: argparse.Namespace) -> int:
    """Run the research flow on QUESTION: a `loom solve` of the research task, printing insights as they come."""
    from ..run.spec import research_tools
    from ..views.insights import InsightPrinter

    args.task, args.strategy = "research", "research"
    args.tools = ",".join(research_tools(args.knowledge))
    return cmd_solve(args, sinks=[] if args.json else [InsightPrinter()], json_view=research_json)


def research_json(result: Any) -> dict[str, Any]:
    """`loom research --json`: the ResearchResult, with the run's usage, stop reason and store beside it."""
    full = result.to_dict()
    run = {k: full[k] for k in ("model", "answer", "termination_reason", "error", "usage", "stats", "config", "run_id",
                                "store", "graph_cid", "store_error", "control") if k in full}
    return {**(result.research.to_dict() if result.research is not None else {}), "run": run}
