"""`loom serve`: an embedded model behind an OpenAI-compatible HTTP endpoint, loaded once and shared by other
processes; with --strategies, searches served as models too (thoughtloom/run/service.py)."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .common import UsageError, add_threads_option, count, number, positive_float, positive_int

if TYPE_CHECKING:
    from ..llm.serve import OpenAIServer, ServeAccess
    from ..llm.types import Backend
    from ..run.service import ServiceSettings, StrategyService

#: Where the API key is read from when --api-key is not given (an option shows in the process list; this does not).
KEY_VARIABLE = "THOUGHTLOOM_SERVE_KEY"


def add_serve_parser(sub: Any) -> None:
    """Add `serve` to loom's subparsers."""
    p = sub.add_parser(
        "serve", help="serve an embedded model over an OpenAI-compatible HTTP API",
        description="Load an embedded model once and answer OpenAI's /v1/models, /v1/completions and "
                    "/v1/chat/completions until Ctrl-C. Point any OpenAI client at the printed URL, or another "
                    "loom at --model openai-compatible:URL@MODEL. Requests must name the server by its address "
                    "(Host), and requests from web pages are refused unless --allow-origin names their origin.")
    p.add_argument("--model", default="local", metavar="SPEC",
                   help="the embedded model: local (the default one), local:NAME or local:/path/to/model.gguf")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; elsewhere, set an API key)")
    p.add_argument("--port", type=number("--port", int, lambda v: 0 <= v <= 65535, "from 0 to 65535"), default=8000,
                   help="port to listen on (default 8000; 0: any free port, which the printed URL names)")
    p.add_argument("--api-key", metavar="KEY",
                   help=f"require 'Authorization: Bearer KEY' on every request (default: ${KEY_VARIABLE}, else no "
                        f"key); prefer ${KEY_VARIABLE}, which other users cannot see in the process list")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (scheme://host[:port], e.g. http://localhost:3000) call the API; "
                        "repeatable (default: pages from every origin are refused)")
    p.add_argument("--max-connections", type=positive_int("--max-connections", 100_000), default=64, metavar="N",
                   help="connections open at once; more are answered 503 (default 64)")
    p.add_argument("--max-queue", type=count("--max-queue", 100_000), default=32, metavar="N",
                   help="requests waiting for the model beyond those it generates; more are answered 503 with "
                        "Retry-After (default 32)")
    add_threads_option(p)
    p.add_argument("--ctx", type=number("--ctx", int, lambda v: 16 <= v <= 1 << 20, "from 16 to 1,048,576"),
                   metavar="N", help="context window in tokens, prompt plus reply (default: the model's)")
    s = p.add_argument_group(
        "search as a service", "serve strategies as models: a chat request naming one (e.g. tot) runs that search over "
        "--model on its last user message and answers with the search's answer")
    s.add_argument("--strategies", metavar="LIST",
                   help="strategies served as models, comma-separated (tot, bfs, research, cove, ...), or all; with a "
                        "remote --model (openai-compatible:URL@MODEL, ...) only these are served")
    s.add_argument("--store", metavar="PATH",
                   help="record every served search in this run store; replies then carry the run id for loom "
                        "show/view/replay (default: not stored)")
    s.add_argument("--profile", metavar="NAME",
                   help="the domain profile every served search runs with, as loom solve --profile: thresholds, "
                        "depth limits, checks, grounding policy (see loom profiles; default: default)")
    s.add_argument("--search-tokens", type=positive_int("--search-tokens"), default=20_000, metavar="N",
                   help="most tokens one search may spend; a request may ask for fewer, never more (default 20000)")
    s.add_argument("--search-seconds", type=positive_float("--search-seconds"), default=300.0, metavar="S",
                   help="most seconds one search may take; a request may ask for fewer (default 300)")
    s.add_argument("--max-searches", type=positive_int("--max-searches", 1_000), default=2, metavar="N",
                   help="searches running at once; more are answered 503 (default 2)")


def cmd_serve(args: argparse.Namespace) -> int:
    """Load the model, print the base URL, serve until Ctrl-C (or SIGTERM)."""
    from ..llm.registry import local_backend, parse_model_spec
    from ..llm.serve import OpenAIServer, ServeLimits
    from ..llm.threads import threads_setting
    from ..views.terminal import terminal_text

    spec = parse_model_spec(args.model)
    if not spec.is_local and args.strategies is None:
        raise UsageError(f"loom serve serves an embedded model (--model local, local:NAME or local:PATH); "
                         f"{args.model} is a remote model, which its own server already serves (to serve searches "
                         "over it, add --strategies)")

    def say(message: str) -> None:
        print(terminal_text(f"loom: {message}"), file=sys.stderr)

    access = _access(args, os.environ)
    backend = local_backend(spec, n_ctx=args.ctx, n_threads=threads_setting(args.threads, os.environ),
                            progress=say) if spec.is_local else None
    searches = _searches(args, backend)
    limits = ServeLimits(max_connections=args.max_connections, max_queue=args.max_queue)
    server = OpenAIServer(backend, args.host, args.port, access=access, limits=limits, searches=searches)
    try:
        server.bind()  # before loading: a busy port is reported at once, not after the model loads
    except OSError as exc:  # a busy port, an address this machine does not have
        reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {reason}") from None
    if backend is not None:
        backend.load()  # before the URL is printed: a client that reads it finds the model ready
    if access.api_key is not None:
        say("requests need the API key (Authorization: Bearer KEY)")
    elif not _loopback(args.host):
        say(f"warning: no API key (--api-key or ${KEY_VARIABLE}); anyone who can reach {server.url} can use the model")
    served = ([backend.name] if backend is not None else []) + list(searches.names if searches is not None else ())
    try:
        asyncio.run(_serve(server, ", ".join(served)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # Ctrl-C or SIGTERM: the way to stop a server, not an error
    finally:
        if backend is not None:
            backend.stop()  # the engine's thread must not be decoding while the process exits
    return 0


def _searches(args: argparse.Namespace, backend: Backend | None) -> StrategyService | None:
    """The searches served as models (None without --strategies), checked before any model loads."""
    from ..run.service import StrategyService

    if args.strategies is None:
        for flag, value in (("--store", args.store), ("--profile", args.profile)):
            if value is not None:
                raise UsageError(f"{flag} is a setting of served searches; add --strategies LIST, the strategies "
                                 "to serve")
        return None
    service = StrategyService(_settings(args, backend if backend is not None else args.model))
    try:
        service.check()
    except ValueError as exc:
        raise UsageError(f"the served searches cannot run with these settings: {exc}") from None
    return service


def _settings(args: argparse.Namespace, model: str | Backend) -> ServiceSettings:
    """The operator's settings for served searches, from the command line (UsageError, one line, when wrong)."""
    from ..control.profiles import UnknownProfile, get_profile
    from ..llm.errors import ModelError
    from ..llm.registry import make_backend
    from ..run.service import ServiceSettings, served_names
    from ..store.store import StoreError
    from .common import open_store

    try:
        names = served_names(args.strategies)
    except ValueError as exc:
        raise UsageError(f"--strategies: {exc}") from None
    profile = args.profile or "default"
    try:
        get_profile(profile)
    except UnknownProfile as exc:
        raise UsageError(f"--profile: {exc}") from None
    if isinstance(model, str):
        try:  # a missing key or an unusable spec is the operator's to fix, now, not every client's later
            asyncio.run(make_backend(model).aclose())
        except ModelError as exc:
            raise UsageError(f"--model {model}: {exc}") from None
    store = None
    if args.store is not None:
        try:
            opened, path = open_store(args.store, must_exist=False)
        except StoreError as exc:
            raise UsageError(f"--store: {exc}") from None
        opened.close()
        store = str(path)
    return ServiceSettings(names=names, model=model, store=store, max_tokens=args.search_tokens,
                           max_seconds=args.search_seconds, max_runs=args.max_searches, profile=profile)


async def _serve(server: OpenAIServer, name: str) -> None:
    await server.start()
    try:
        print(f"serving {name} at {server.url}", flush=True)
        task = asyncio.current_task()
        assert task is not None
        # A service manager stops with SIGTERM: end as cleanly as on Ctrl-C.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await server.serve_forever()
    finally:
        await server.aclose()


def _access(args: argparse.Namespace, env: Mapping[str, str]) -> ServeAccess:
    """Who may use the server: the key from --api-key or the environment, and the web origins allowed."""
    from ..llm.serve import ServeAccess, web_origin

    key = args.api_key if args.api_key is not None else env.get(KEY_VARIABLE) or None
    if key is not None and not (key and key == key.strip() and key.isascii() and key.isprintable()):
        source = "--api-key" if args.api_key is not None else f"${KEY_VARIABLE}"
        # The key itself is never shown: it may be a real secret with a typo in it.
        raise UsageError(f"{source}: the API key must be printable ASCII without spaces at its ends (clients send "
                         "it in a header); choose another key")
    origins = []
    for origin in args.allow_origin:
        try:
            origins.append(web_origin(origin))
        except ValueError as exc:
            raise UsageError(f"--allow-origin: {exc}") from None
    return ServeAccess(api_key=key, allow_origins=tuple(origins))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
