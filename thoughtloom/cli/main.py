"""`loom`: the command line. Each command family lives in its own module (solve, runs, bench);
imports stay inside commands so `loom --help` is instant."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .common import Parser, UsageError, positive_float, positive_int


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for all commands."""
    parser = Parser(
        prog="loom",
        description="Make a language model reason as a tree or graph of thoughts, under a hard budget.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    from .agent import add_agent_parser
    from .bench import add_bench_parser
    from .data import add_data_parser
    from .models import add_models_parser
    from .research import add_research_parser
    from .runs import add_store_commands
    from .serve import add_serve_parser
    from .solve import add_solve_parser

    add_solve_parser(sub)
    add_agent_parser(sub)
    add_research_parser(sub)
    add_bench_parser(sub, positive_int, positive_float)
    add_data_parser(sub)
    add_store_commands(sub)
    add_models_parser(sub)
    add_serve_parser(sub)
    tasks = sub.add_parser("tasks", help="list the tasks")
    tasks.add_argument("--task-file", metavar="FILE", action="append", default=[],
                       help="list the task this TOML file declares too (repeatable)")
    profiles = sub.add_parser("profiles", help="list the domain profiles: thresholds, limits, grounding and checks")
    profiles.add_argument("--json", action="store_true", help="every setting of every profile as JSON")
    parser.add_argument("--version", action="store_true", help="print the version")
    add_logging_options(parser)
    add_trace_option(parser)
    for command in sub.choices.values():  # `loom solve -v ...` as well as `loom -v solve ...`
        add_logging_options(command, argparse.SUPPRESS)
        add_trace_option(command, argparse.SUPPRESS)
    return parser


def add_logging_options(parser: argparse.ArgumentParser, default: object = None) -> None:
    """-v (info; -vv debug) and --log-level: what the library logs (retries, budget refusals, grounding, tools)."""
    from ..views.logs import LEVELS

    parser.add_argument("-v", "--verbose", action="count", default=0 if default is None else default,
                        help="log more on stderr: -v retries, budget refusals, grounding and tool calls; -vv debug")
    parser.add_argument("--log-level", choices=LEVELS, default=default,
                        help="the least severe log records shown on stderr (default warning; wins over -v)")


def add_trace_option(parser: argparse.ArgumentParser, default: object = None) -> None:
    """--trace FILE: the command's OpenTelemetry spans as OTLP JSON Lines (the OTEL_* variables also work)."""
    parser.add_argument(
        "--trace",
        metavar="FILE",
        default=default,
        help="append the OpenTelemetry spans (searches, model and tool calls) to FILE as OTLP JSON "
        "Lines (otel extra); OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT send them over OTLP",
    )


def cmd_profiles(args: argparse.Namespace) -> int:
    """List profiles with their thresholds, limits, grounding policy and checks."""
    from ..control.profiles import PROFILES

    if args.json:
        import json

        print(json.dumps([p.to_dict() for p in PROFILES.values()], indent=2))
        return 0
    print(f"{'profile':<20}{'acceptable':>11}{'goal':>6}{'compromise':>11}{'soft':>6}{'hard':>6}{'beam':>6}"
          f"{'task':>8}{'penalty':>9}{'boost':>7}{'unverified':>12}  description")
    for p in PROFILES.values():
        def show(v: object) -> str:
            return "task" if v is None else str(v)

        print(
            f"{p.name:<20}{p.acceptable_threshold:>11.2f}{p.goal_threshold:>6.2f}{p.compromise_threshold:>11.2f}"
            f"{show(p.soft_depth):>6}{p.hard_depth or f'+{p.depth_margin}'!s:>6}{show(p.search.get('beam')):>6}"
            f"{p.default_task or '-':>8}{p.grounding.fail_factor:>9.2f}{p.grounding.boost:>7.2f}"
            f"{p.grounding.unverified_factor:>12.2f}  {p.description}"
        )
    # The domain's other settings (checks, and search settings beyond the table's), as `loom profiles --json` has them.
    print("\nother settings:")
    for p in PROFILES.values():
        others = {k: v for k, v in p.search.items() if k not in ("beam", "max_nodes")}
        print(f"  {p.name:<20}{_settings({**p.checks.changed(), **others}) or '-'}")
    return 0


def _settings(values: dict[str, object]) -> str:
    """`name=value` pairs, booleans and None written as in JSON."""
    import json

    return " ".join(f"{k}={json.dumps(v)}" for k, v in values.items())


def cmd_tasks(args: argparse.Namespace) -> int:
    """List tasks: the built-in ones, those installed packages add, and those of the task files given."""
    from ..run.taskfile import load_task
    from ..tasks.registry import all_tasks
    from ..views.terminal import terminal_text

    tasks = sorted((name, description) for name, (description, _) in all_tasks().items())
    for path in args.task_file:
        task = load_task(path)  # a bad file: one line, exit 2, before anything is listed
        checker = f" (checker: {task.checker.name})" if task.checker is not None else ""
        tasks.append((task.name, f"{task.description}{checker} [from {path}]"))
    width = max((len(name) for name, _ in tasks), default=0)
    for name, description in tasks:
        print(terminal_text(f"{name:<{width}}  {description}"))  # an installed package's text is not ours to trust
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `loom` command (argv None: the process's own command line, and the process is loom's)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # loom is this process (not a caller's command run inside its own): its output is ours to set
        _escape_unwritable_output()
    if args.version:
        from .._version import __version__

        print(f"loom {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    from ..grounding.neighbours import make_process_private
    from ..views.logs import log_level, shown_logs

    with shown_logs(sys.stderr, log_level(args.verbose, args.log_level)):
        if argv is None:
            # loom is this process (the `loom` script, `python -m thoughtloom`): before anything is
            # started, close its /proc files (the keys in its environment, its memory) to the MCP
            # servers, sandboxed programs and other programs of the user. A caller that passes argv
            # runs a command inside its own process, whose settings are its own to choose.
            why_not = make_process_private()
            if why_not is not None:
                logging.getLogger(__name__).warning("other programs of your user can read loom's /proc files: %s",
                                                    why_not)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command: one-line errors and exit codes for what the user can fix."""
    from ..control.profiles import UnknownProfile
    from ..grounding.sandbox import SandboxUnavailable
    from ..llm.errors import ModelError
    from ..run.spec import SpecError
    from ..search.scorer import ScorerError
    from ..search.strategies.registry import StrategyError
    from ..tasks.base import ProblemError, UnsupportedOperation
    from ..tasks.registry import TaskOptionError, UnknownTask
    from .agent import cmd_agent
    from .bench import cmd_bench
    from .data import cmd_data
    from .models import cmd_models
    from .research import cmd_research
    from .runs import COMMANDS as STORE_COMMANDS, store_errors
    from .serve import cmd_serve
    from .solve import cmd_solve

    commands = {
        "solve": cmd_solve,
        "agent": cmd_agent,
        "research": cmd_research,
        "bench": cmd_bench,
        "data": cmd_data,
        "tasks": cmd_tasks,
        "profiles": cmd_profiles,
        "models": cmd_models,
        "serve": cmd_serve,
        **STORE_COMMANDS,
    }

    def reported() -> tuple[type[Exception], ...]:
        """Errors reported as one line with exit code 2 (called only once one was raised: the store loads then)."""
        return (UsageError, SpecError, ProblemError, UnknownTask, UnknownProfile, UnsupportedOperation, ModelError,
                TaskOptionError, SandboxUnavailable, ScorerError, StrategyError, *store_errors())

    from .otel import exported_spans

    try:
        with exported_spans(args.trace):
            code = commands[args.command](args)
        try:
            sys.stdout.flush()  # inside the try: a reader that went away is handled below, not at exit
        except BrokenPipeError:
            raise
        except OSError as exc:  # a full disk or a dead terminal behind stdout
            _stdout_to_devnull()
            print(f"loom: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return code
    except reported() as exc:
        from ..views.terminal import terminal_text

        print(f"loom: error: {terminal_text(str(exc))}", file=sys.stderr)  # may quote a server or a file
        return 2
    except KeyboardInterrupt:
        print("loom: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`loom runs | head`): stop quietly, as other command-line tools do.
        _stdout_to_devnull()
        return 141
    except OSError as exc:
        from ..views.terminal import terminal_text

        try:
            sys.stdout.flush()  # what was printed goes out
        except OSError:  # stdout itself failed (while printing): the exit-time flush must not fail again
            _stdout_to_devnull()
        message = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        print(f"loom: error: {terminal_text(message)}", file=sys.stderr)
        return 2


def _escape_unwritable_output() -> None:
    """Print what stdout's or stderr's encoding cannot hold (an ASCII locale, a lone surrogate) as
    escapes: text from a model, a tool or a file never ends the command with a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def _stdout_to_devnull() -> None:
    """Send stdout (and what is still buffered for it) to /dev/null, so the exit-time flush cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
