"""Summaries of a run: a table per data set, JSON, CSV, and a plot of quality against tokens spent."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean

from ..llm.budget import Pricing
from .results import Record
from .stats import mean_ci, median, median_ci, wilson

SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
PLOT_PNG = "quality_vs_tokens.png"
#: Stop reasons of a lane that did not get to answer (lanes.LaneStop's values and the model's error).
LANE_ERRORS = ("model_error", "lane_crashed", "unsupported")


@dataclass(frozen=True, slots=True)
class LaneSummary:
    """One lane on one data set: quality with its 95% interval, and what it cost."""

    task: str
    lane: str
    #: "rate": success rate; "errors": median error and solved count; "f1": exact-match rate (solved)
    #: and mean F1 (HotpotQA); "unchecked": no checker, so no success rate (a free-text question)
    metric: str
    n: int
    planned: int
    solved: int
    rate: float
    rate_ci: tuple[float, float]
    #: any@k: some candidate solved it (lanes with several candidates only)
    any_of_k: float | None
    median_errors: float | None
    median_errors_ci: tuple[float, float] | None
    #: "f1" metric: the mean answer F1 and its 95% bootstrap percentile interval (stats.mean_ci)
    mean_f1: float | None
    mean_f1_ci: tuple[float, float] | None
    mean_tokens: float
    mean_calls: float
    wall_s: float
    mean_wall_s: float
    #: problems where the lane hit a model error, crashed or met a step its task lacks (counted as unsolved)
    lane_errors: int
    #: mean tool calls per problem (the agent lane); None for lanes that call no tools
    mean_tool_calls: float | None = None
    #: lanes that cite (research): problems whose answer cited at least one sentence, and over those the
    #: mean share of cited sentences that are gold supporting facts with its 95% bootstrap interval;
    #: None for lanes that do not cite
    citing: int | None = None
    mean_support_precision: float | None = None
    mean_support_precision_ci: tuple[float, float] | None = None
    #: dollars spent, in all and per problem, at the lane's price (the user's or the known list's);
    #: None when the lane's model has no known price: unknown, never $0
    cost_usd: float | None = None
    mean_cost_usd: float | None = None
    #: the set's partial scores (crosswords: letters, words): name -> (mean, its 95% bootstrap interval)
    parts: dict[str, tuple[float, tuple[float, float] | None]] | None = None


def summarize(records: Iterable[Record], metrics: dict[str, str], lanes: Sequence[str],
              planned: dict[str, int], skip: dict[str, dict[str, str]] | None = None,
              prices: Mapping[str, Pricing | None] | None = None) -> list[LaneSummary]:
    """Per (data set, lane) summaries, in the protocol's order; lanes in `skip` (not applicable) left out.

    prices: lane -> what its tokens cost (None or missing: unknown, and so is the lane's cost)."""
    skip = skip or {}
    prices = prices or {}
    by: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        by.setdefault((r.task, r.lane), []).append(r)
    out = []
    for task, metric in metrics.items():
        for lane in lanes:
            if lane in skip.get(task, {}):
                continue
            rs = by.get((task, lane), [])
            n = len(rs)
            solved = sum(r.solved for r in rs)
            multi = [r for r in rs if r.any_correct is not None]
            errors = [r.errors for r in rs if r.errors is not None]
            # Every record of an F1 data set has one (an answer-less lane scores 0); None counts as 0 too.
            f1s = [r.f1 or 0.0 for r in rs]
            tool_calls = [r.tool_calls for r in rs if r.tool_calls is not None]
            cites = any(r.cited is not None for r in rs)
            # Only answers that cite a sentence have a precision; the others are counted apart, not as 0.
            precisions = [r.support_precision for r in rs if r.support_precision is not None]
            price = prices.get(lane)
            cost = None if price is None else sum(price.cost(r.input_tokens, r.output_tokens) for r in rs)
            out.append(LaneSummary(
                task=task, lane=lane, metric=metric, n=n, planned=planned.get(task, n), solved=solved,
                rate=solved / n if n else 0.0, rate_ci=wilson(solved, n),
                any_of_k=(sum(bool(r.any_correct) for r in multi) / len(multi)) if multi else None,
                median_errors=median(errors) if metric == "errors" else None,
                median_errors_ci=median_ci(errors) if metric == "errors" else None,
                mean_f1=fmean(f1s) if metric == "f1" and rs else None,
                mean_f1_ci=mean_ci(f1s) if metric == "f1" else None,
                mean_tokens=fmean(r.tokens for r in rs) if rs else 0.0,
                mean_calls=fmean(r.calls for r in rs) if rs else 0.0,
                wall_s=sum(r.wall_s for r in rs), mean_wall_s=fmean(r.wall_s for r in rs) if rs else 0.0,
                lane_errors=sum(1 for r in rs if r.stop_reason in LANE_ERRORS),
                mean_tool_calls=fmean(tool_calls) if tool_calls else None,
                citing=len(precisions) if cites else None,
                mean_support_precision=fmean(precisions) if precisions else None,
                mean_support_precision_ci=mean_ci(precisions),
                cost_usd=cost, mean_cost_usd=None if cost is None or not rs else cost / len(rs),
                parts=_parts(rs),
            ))
    return out


def winner_lines(summaries: Sequence[LaneSummary]) -> list[str]:
    """Per data set scored by a rate or F1: which lane wins on it, at what cost in tokens and seconds per
    problem, and whether its 95% interval separates it from the others (else which lanes it does not beat)."""
    out = []
    for task in dict.fromkeys(s.task for s in summaries):
        rows = [s for s in summaries if s.task == task and s.n and s.metric in ("rate", "f1")]
        if not rows:
            continue
        f1 = rows[0].metric == "f1"
        quality, interval = _quality(f1), _interval(f1)
        # The best quality wins; between equals, the cheaper in tokens, then the lane named first: never the
        # seconds, which a busy machine or another executor changes, so one protocol always names one winner.
        best = min(rows, key=lambda s: (-quality(s), s.mean_tokens))
        measure = "mean F1" if f1 else "success"
        lo, hi = interval(best)
        line = (f"winner on {task}: {best.lane}, {measure} {quality(best):.0%} [{lo:.0%}, {hi:.0%}] at "
                f"{best.mean_tokens:,.0f} tokens and {best.mean_wall_s:.1f} s per problem")
        others = [s for s in rows if s is not best]
        close = [s for s in others if interval(s)[1] >= lo]
        if not others:
            line += " (the only lane)"
        elif close:
            line += ("; not separated from " + ", ".join(
                f"{s.lane} ({quality(s):.0%} at {s.mean_tokens:,.0f} tokens, {s.mean_wall_s:.1f} s)" for s in close)
                + " by the 95% intervals")
        else:
            line += "; ahead of every other lane beyond the 95% intervals"
        out.append(line)
    return out


def _quality(f1: bool) -> Callable[[LaneSummary], float]:
    """What a winner is chosen by: the mean F1 on an F1 data set, else the success rate."""
    return (lambda s: s.mean_f1 or 0.0) if f1 else (lambda s: s.rate)


def _interval(f1: bool) -> Callable[[LaneSummary], tuple[float, float]]:
    """The 95% interval of `_quality`."""
    return (lambda s: s.mean_f1_ci or (0.0, 1.0)) if f1 else (lambda s: s.rate_ci)


def _parts(records: Sequence[Record]) -> dict[str, tuple[float, tuple[float, float] | None]] | None:
    """Mean and interval of each partial score the records carry (a record without one counts 0); None: none do."""
    names = list(dict.fromkeys(name for r in records for name in (r.parts or {})))
    if not names:
        return None
    out = {}
    for name in names:
        values = [(r.parts or {}).get(name, 0.0) for r in records]
        out[name] = (fmean(values), mean_ci(values))
    return out


def left_out_lines(skip: dict[str, dict[str, str]]) -> list[str]:
    """One line per lane left out of a data set, with the reason."""
    return [f"left out of {task}: {why}" for task, lanes in skip.items() for why in lanes.values()]


def format_table(summaries: Sequence[LaneSummary], skip: dict[str, dict[str, str]] | None = None) -> str:
    """A text table per data set (Markdown, so it pastes into a README as is)."""
    skip = skip or {}
    blocks = []
    for task in dict.fromkeys(s.task for s in summaries):
        rows = [s for s in summaries if s.task == task]
        errors = rows[0].metric == "errors"
        f1 = rows[0].metric == "f1"
        head = ["lane", "n"]
        head += ["median errors [95% CI]", "solved"] if errors else \
            ["EM [95% CI]", "mean F1 [95% CI]", "any@k"] if f1 else ["success [95% CI]", "any@k"]
        tools = any(s.mean_tool_calls is not None for s in rows)  # a column only where a lane calls tools
        cites = any(s.citing is not None for s in rows)  # a column only where a lane cites sentences
        parts = list(dict.fromkeys(name for s in rows for name in (s.parts or {})))  # e.g. crosswords' letters, words
        head += [f"mean {name} [95% CI]" for name in parts]
        if cites:
            head.append("support precision [95% CI] (answers citing)")
        head += ["mean tokens", "mean calls", *(["mean tool calls"] if tools else []), "wall s (mean)",
                 "cost USD (mean)"]
        lines = [f"### {task}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for s in rows:
            n = f"{s.n}" if s.n == s.planned else f"{s.n}/{s.planned}"
            if errors:
                ci = s.median_errors_ci
                q = (
                    "-"
                    if s.median_errors is None
                    else f"{s.median_errors:g} [{ci[0]:g}, {ci[1]:g}]"
                    if ci
                    else f"{s.median_errors:g}"
                )
                cells = [q, f"{s.solved}/{s.n}"]
            elif s.metric == "unchecked":
                cells = ["- (no checker)", "-"]
            else:
                cells = [f"{s.solved}/{s.n} = {s.rate:.0%} [{s.rate_ci[0]:.0%}, {s.rate_ci[1]:.0%}]"]
                if f1:
                    cells.append(_f1_cell(s))
                cells.append("-" if s.any_of_k is None else f"{s.any_of_k:.0%}")
            cells += [_part_cell(s, name) for name in parts]
            if cites:
                cells.append(_precision_cell(s))
            cells += [f"{s.mean_tokens:,.0f}", f"{s.mean_calls:.1f}"]
            if tools:
                cells.append("-" if s.mean_tool_calls is None else f"{s.mean_tool_calls:.1f}")
            cells.append(f"{s.wall_s:,.0f} ({s.mean_wall_s:.1f})")
            cells.append(_cost_cell(s))
            lines.append("| " + " | ".join([s.lane, n, *cells]) + " |")
        for s in rows:
            if s.lane_errors:
                lines.append(f"\n{s.lane}: {s.lane_errors} of {s.n} problems ended in a model error, a crash or an "
                             "unsupported step (counted as unsolved; see results.jsonl)")
        for lane, why in skip.get(task, {}).items():
            lines.append(f"\nnot run on {task}: {lane} ({why})")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _part_cell(s: LaneSummary, name: str) -> str:
    """A partial score's mean with its interval, e.g. '0.42 [0.30, 0.55]' ('-' where the lane has none)."""
    if not s.parts or name not in s.parts:
        return "-"
    mean, ci = s.parts[name]
    return f"{mean:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{mean:.2f}"


def _cost_cell(s: LaneSummary) -> str:
    """Dollars in all and per problem, e.g. '$0.0123 ($0.0031)'; 'unknown' without a price."""
    if s.cost_usd is None or s.mean_cost_usd is None:
        return "unknown"
    return f"${s.cost_usd:.4g} (${s.mean_cost_usd:.4g})"


def _f1_cell(s: LaneSummary) -> str:
    """Mean F1 with its interval, e.g. '0.42 [0.30, 0.55]' ('-' with no problems run)."""
    if s.mean_f1 is None:
        return "-"
    ci = s.mean_f1_ci
    return f"{s.mean_f1:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{s.mean_f1:.2f}"


def _precision_cell(s: LaneSummary) -> str:
    """Mean supporting-fact precision with its interval and how many answers it is over, e.g. '0.40 [0.20, 0.60]
    (8/10)'."""
    if s.citing is None:
        return "-"  # the lane does not cite
    if s.mean_support_precision is None:
        return f"- (0/{s.n})"
    ci = s.mean_support_precision_ci
    mean = f"{s.mean_support_precision:.2f}"
    return f"{mean} [{ci[0]:.2f}, {ci[1]:.2f}] ({s.citing}/{s.n})" if ci else f"{mean} ({s.citing}/{s.n})"


def write_json(path: Path, manifest: dict[str, object], summaries: Sequence[LaneSummary], audit: list[str],
               left_out: dict[str, dict[str, str]] | None = None) -> None:
    """The manifest, the audit, the summaries and the lanes left out (data set -> lane -> why) in one JSON file."""
    data = {"manifest": manifest, "parity_audit": audit, "summaries": [asdict(s) for s in summaries],
            "left_out": [{"task": task, "lane": lane, "reason": why}
                         for task, lanes in (left_out or {}).items() for lane, why in lanes.items()]}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_csv(path: Path, summaries: Sequence[LaneSummary]) -> None:
    """One row per (data set, lane)."""
    fields = ["task", "lane", "metric", "n", "planned", "solved", "rate", "rate_ci_low", "rate_ci_high", "any_of_k",
              "median_errors", "median_errors_ci_low", "median_errors_ci_high", "mean_f1", "mean_f1_ci_low",
              "mean_f1_ci_high", "mean_tokens", "mean_calls", "wall_s", "mean_wall_s", "lane_errors", "mean_tool_calls",
              "citing", "mean_support_precision", "mean_support_precision_ci_low", "mean_support_precision_ci_high",
              "cost_usd", "mean_cost_usd", "parts"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for s in summaries:
            ci = s.median_errors_ci or (None, None)
            f1_ci = s.mean_f1_ci or (None, None)
            sp_ci = s.mean_support_precision_ci or (None, None)
            w.writerow([s.task, s.lane, s.metric, s.n, s.planned, s.solved, f"{s.rate:.4f}", f"{s.rate_ci[0]:.4f}",
                        f"{s.rate_ci[1]:.4f}", "" if s.any_of_k is None else f"{s.any_of_k:.4f}",
                        "" if s.median_errors is None else s.median_errors, "" if ci[0] is None else ci[0],
                        "" if ci[1] is None else ci[1], _num(s.mean_f1), _num(f1_ci[0]), _num(f1_ci[1]),
                        f"{s.mean_tokens:.1f}", f"{s.mean_calls:.2f}", f"{s.wall_s:.1f}", f"{s.mean_wall_s:.2f}",
                        s.lane_errors, _num(s.mean_tool_calls), "" if s.citing is None else s.citing,
                        _num(s.mean_support_precision), _num(sp_ci[0]), _num(sp_ci[1]),
                        _usd(s.cost_usd), _usd(s.mean_cost_usd),
                        json.dumps({k: round(v[0], 4) for k, v in s.parts.items()}) if s.parts else ""])


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.4f}"


def _usd(x: float | None) -> str:
    # Dollars need more places than rates: a small model's problem can cost well under $0.0001.
    return "" if x is None else f"{x:.8f}"


def write_plot(path: Path, summaries: Sequence[LaneSummary], title: str = "") -> str | None:
    """Quality against mean tokens per problem, one point (with its 95% CI) per lane and one panel
    per data set. Returns None when written, else a one-line note (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed: the plot is a file
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install 'thoughtloom[plot]')"
    tasks = list(dict.fromkeys(s.task for s in summaries))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        rows = [s for s in summaries if s.task == task and s.n]
        errors = bool(rows) and rows[0].metric == "errors"
        for s in rows:
            if errors:
                y = s.median_errors or 0.0
                lo, hi = s.median_errors_ci or (y, y)
            else:
                y, (lo, hi) = s.rate * 100, (s.rate_ci[0] * 100, s.rate_ci[1] * 100)
            # max(0, ...): rounding can put y a hair outside its own interval.
            ax.errorbar([s.mean_tokens], [y], yerr=[[max(0.0, y - lo)], [max(0.0, hi - y)]], fmt="o", capsize=4,
                        label=s.lane)
            ax.annotate(s.lane, (s.mean_tokens, y), textcoords="offset points", xytext=(6, 4), fontsize=9)
        ax.set_xlabel("mean tokens per problem (input + output)")
        exact = "EM rate" if bool(rows) and rows[0].metric == "f1" else "success rate"
        ax.set_ylabel("median errors (lower is better)" if errors else f"{exact}, % (95% Wilson CI)")
        n = max((s.n for s in rows), default=0)
        ax.set_title(f"{task} (n={n})")
        if not errors:
            ax.set_ylim(-3, 103)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        if rows:
            ax.legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
