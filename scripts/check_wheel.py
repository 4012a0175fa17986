"""Build thoughtloom's sdist and wheel, check them with twine, install the wheel into a clean venv and run loom.

    python scripts/check_wheel.py                 # the wheel and its dependencies from the package index
    python scripts/check_wheel.py --local         # ... with the `local` extra, then the main job (game24)
    python scripts/check_wheel.py --offline       # dependencies from this Python's environment: no network

Needs `build` and `twine` in the Python that runs it (`pip install 'thoughtloom[dev]'` brings both). The
build runs on a copy of the checkout, so the checkout gets no build/ or egg-info. With --offline the venv
is clean of everything but the wheel; the dependencies this environment has already are made importable
after the venv's own site-packages (a path file), so the installed thoughtloom is the wheel's, not this one.
The suite runs it that way (tests/test_packaging.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Not part of a source distribution's input (caches, environments, earlier builds).
NOT_SOURCE = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "out")
MAIN_JOB = ("solve", "--task", "game24", "4 5 6 10")


class CheckFailed(Exception):
    """A step of the check failed; the message says which and why."""


def run(argv: list[str], what: str, **kwargs: object) -> str:
    """Run a step; its stdout, or CheckFailed with the end of its output."""
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise CheckFailed(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return str(proc.stdout)


def build(out: Path) -> tuple[Path, Path]:
    """The sdist and the wheel built from a copy of the checkout (the wheel from the sdist, as `build` does)."""
    with tempfile.TemporaryDirectory(prefix="thoughtloom-src-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE))
        run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], "python -m build")
    sdists, wheels = sorted(out.glob("thoughtloom-*.tar.gz")), sorted(out.glob("thoughtloom-*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise CheckFailed(f"expected one sdist and one wheel in {out}, found {[p.name for p in out.iterdir()]}")
    return sdists[0], wheels[0]


def version() -> str:
    """The version thoughtloom/_version.py declares (its one source)."""
    text = (ROOT / "thoughtloom" / "_version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise CheckFailed("thoughtloom/_version.py declares no __version__")
    return found.group(1)


#: The venv's commands (pip's into it too) run without PYTHONPATH: nothing of this environment leaks into it.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def make_venv(venv: Path, offline: bool) -> Path:
    """A new venv (from the base interpreter, not this venv; without pip: this one's installs into it); its python."""
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)], "python -m venv",
        env=CLEAN_ENV)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    if offline:
        here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "locate site",
                   env=CLEAN_ENV)
        # Plain paths: a path file inside them (this environment's own editable thoughtloom) is not run.
        (Path(site.strip()) / "zz-dependencies-from-the-test-environment.pth").write_text(
            "".join(f"{p}\n" for p in sorted(here)), encoding="utf-8")
    return python


def check(out: Path, *, local: bool, offline: bool) -> list[str]:
    """Every step; what each showed, one line each."""
    said: list[str] = []
    sdist, wheel = build(out)
    said.append(f"built {sdist.name} and {wheel.name}")
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], "twine check")
    said.append("twine check --strict passed")
    python = make_venv(out / "venv", offline)
    target = f"{wheel}[local]" if local else str(wheel)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, *(["--no-index", "--no-deps"] if offline else []), target], f"pip install {target}", env=CLEAN_ENV)
    said.append(f"installed {wheel.name}{'[local]' if local else ''} into a clean venv")
    # Not from the checkout: `-c` puts the working directory first on sys.path.
    where = run([str(python), "-c", "import thoughtloom; print(thoughtloom.__file__)"], "import thoughtloom",
                cwd=out, env=CLEAN_ENV).strip()
    if not Path(where).is_relative_to(out / "venv"):
        raise CheckFailed(f"the venv imported thoughtloom from {where}, not from the wheel it installed")
    loom = python.parent / ("loom.exe" if os.name == "nt" else "loom")
    help_text = run([str(loom), "--help"], "loom --help", cwd=out, env=CLEAN_ENV)
    if "solve" not in help_text:
        raise CheckFailed(f"loom --help does not list the solve command:\n{help_text}")
    said.append("loom --help works")
    shown = run([str(loom), "--version"], "loom --version", cwd=out, env=CLEAN_ENV).strip()
    if shown != f"loom {version()}":
        raise CheckFailed(f"loom --version says {shown!r}; thoughtloom/_version.py says {version()!r}")
    said.append(shown)
    if local:
        printed = run([str(loom), *MAIN_JOB], "the main job", cwd=out, env=CLEAN_ENV).splitlines()
        answer = next((line for line in printed if line.startswith("answer:")), None)
        if answer is None:
            raise CheckFailed("the main job printed no answer line:\n" + "\n".join(printed[-15:]))
        said.append(f"loom {' '.join(MAIN_JOB)}: {answer}")
    return said


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", action="store_true", help="install the `local` extra and run the main job")
    parser.add_argument("--offline", action="store_true", help="take the dependencies from this environment")
    parser.add_argument("--out", type=Path, help="where the sdist, the wheel and the venv go (default: a temporary "
                                                 "directory, removed after)")
    args = parser.parse_args(argv)
    if args.local and args.offline:
        parser.error("--local installs the local extra from the package index: not with --offline")
    missing = [module for module in ("build", "twine") if importlib.util.find_spec(module) is None]
    if missing:
        print(f"check_wheel: {' and '.join(missing)} not installed here: pip install build twine", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="thoughtloom-wheel-") as tmp:
        out = args.out.resolve() if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        try:
            for line in check(out, local=args.local, offline=args.offline):
                print(f"check_wheel: {line}", flush=True)
        except CheckFailed as exc:
            print(f"check_wheel: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
