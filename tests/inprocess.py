"""Running `loom` in the test's own process, as a subprocess would run it but without the start-up cost."""

from __future__ import annotations

import subprocess

import pytest


def loom_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run loom's own `main` in this process, as the subprocess would (an exception escaping it fails the test)."""
    from thoughtloom.cli.main import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["loom", *args], code, out.out, out.err)
