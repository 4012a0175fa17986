"""`loom data`: the benchmark data sets, downloading their public originals, and where they are."""

from __future__ import annotations

import argparse
from typing import Any


def add_data_parser(sub: Any) -> None:
    """Add `data list`, `data fetch NAME...` and `data path NAME` to loom's subparsers."""
    from .common import positive_float

    p = sub.add_parser("data", help="benchmark data: list, fetch NAME (download, checksum-checked), path NAME",
                       description="The benchmark data sets `loom bench` reads. 'loom data fetch NAME' downloads "
                                   "the public original, refuses it unless its SHA-256 is the pinned one, applies "
                                   "the standard split and writes it into the cache directory.")
    p.add_argument("action", nargs="?", choices=["list", "fetch", "path"], default="list",
                   help="list (default), fetch or path")
    p.add_argument("names", nargs="*", metavar="NAME", help="fetch: the data sets; path: one data set")
    p.add_argument("--from", dest="base_url", metavar="URL",
                   help="fetch: a mirror serving the data directory's layout instead of the upstream hosts "
                        "(default: $THOUGHTLOOM_DATA_URL); its files are checked against the same checksums")
    p.add_argument("--deadline", type=positive_float("--deadline", 1e6), metavar="S",
                   help="fetch: seconds each file's download may take (default: 60 plus its pinned size at "
                        "256 KiB/s); a download never reads past the file's pinned size (128 MiB where "
                        "none is pinned)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="the data directory (default: $THOUGHTLOOM_DATA, else the cache directory)")


def cmd_data(args: argparse.Namespace) -> int:
    """List the data sets, fetch some, or print where one is."""
    from pathlib import Path

    from ..eval.datasets import find_data_dir
    from ..eval.sources import FetchError, fetch
    from .common import UsageError

    try:
        if args.data_dir:
            # fetch creates a new directory; list and path read an existing one.
            data_dir = Path(args.data_dir).expanduser() if args.action == "fetch" else find_data_dir(args.data_dir)
        else:
            data_dir = find_data_dir(None)
    except ValueError as exc:  # DataError
        raise UsageError(str(exc)) from None
    if args.action == "list":
        if args.names:
            raise UsageError(f"unexpected argument {args.names[0]!r}; did you mean 'loom data fetch {args.names[0]}'?")
        return _list(data_dir)
    if not args.names:
        raise UsageError(f"loom data {args.action} needs a data set name; 'loom data list' lists them")
    if args.action == "path":
        if len(args.names) > 1:
            raise UsageError("loom data path takes one data set name")
        return _path(args.names[0], args.data_dir)
    try:
        for name in args.names:
            for path in fetch(name, data_dir, args.base_url, args.deadline):
                print(f"{name}: {path} (SHA-256 checked)")
    except FetchError as exc:
        raise UsageError(str(exc)) from None
    return 0


def _list(data_dir: Any) -> int:
    from ..eval.datasets import DATASETS
    from ..eval.sources import SOURCES, fetch_command, is_present

    print(f"{'data set':<21}{'split':<7}{'state':<13}{'licence':<14}source")
    for name, src in SOURCES.items():
        state = "here" if is_present(src, data_dir) else "not fetched"
        checked = "" if all(f.original_pinned for f in src.files) else " [original unpinned: its split is checked]"
        checked += " [assembled from several upstream files: the result is checked]" \
            if any(f.assemble for f in src.files) else ""
        print(f"{name:<21}{src.split:<7}{state:<13}{src.licence:<14}{src.origin}{checked}")
    bundled = [n for n, spec in DATASETS.items() if spec.path is None]
    for name in bundled:
        print(f"{name:<21}{'all':<7}{'bundled':<13}{'MIT':<14}{DATASETS[name].note}")
    print("split: develop on dev and train; test is for a final evaluation, never for tuning prompts; "
          "all: published without splits")
    print(f"data directory: {data_dir} ('{fetch_command('NAME')}' downloads into it)")
    return 0


def _path(name: str, data_dir: str | None) -> int:
    from ..eval.datasets import DATASETS, DataError, load_dataset
    from .common import UsageError

    if name not in DATASETS:
        raise UsageError(f"unknown data set {name!r}; choose from: {', '.join(DATASETS)}")
    try:
        # The file the loader reads (an original under its upstream name counts), or the fetch command.
        print(load_dataset(name, data_dir).source)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    return 0
