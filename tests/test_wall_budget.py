"""`--budget-seconds` is a deadline for the whole search, grounding included (issue 12, point 3).

The attack: a model whose programs sleep for 30 s under the visible tests (ignoring the harness's
alarm). A 3 s budget used to run until every sandbox had timed out; now the grounding in flight is
cancelled at the deadline, the sandbox's process group is killed, and the search stops with
termination budget_wall_s and prints the best answer it has.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen
from test_cli import loom
from test_runs import CONFIG, game24_reply

from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits
from thoughtloom.llm.budget import Budget, BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.engine import search
from thoughtloom.tasks.debug import DebugTask
from thoughtloom.tasks.game24 import Game24
from thoughtloom.tasks.registry import TaskOptions, get_task

CORRECT = "```python\ndef add(a, b):\n    return a + b\n```"
# A hostile candidate: it disarms the harness's per-test alarm, then sleeps far past any budget.
SLEEPER = (
    "```python\nimport signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    "def add(a, b):\n    time.sleep(30)\n    return a + b\n```"
)


def sleeper_first(seen: Seen) -> Reply:
    """Every sampling request: one sleeping program first, then correct ones."""
    n = int(seen.body.get("n") or 1)
    texts = [SLEEPER] + [CORRECT] * (n - 1) if n > 1 else [SLEEPER]
    return Reply(200, {
        "id": "x", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": 100, "completion_tokens": 30 * n, "total_tokens": 100 + 30 * n},
    })


def sleeping_model(seen: Seen) -> Reply:
    """Every sample is the sleeping program."""
    n = int(seen.body.get("n") or 1)
    return Reply(200, {
        "id": "x", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": i, "text": SLEEPER, "finish_reason": "stop"} for i in range(n)],
        "usage": {"prompt_tokens": 100, "completion_tokens": 30 * n, "total_tokens": 100 + 30 * n},
    })


def leftovers(tmp: Path) -> list[str]:
    """Sandbox workdirs still in `tmp`, and processes still running in one."""
    found = [p.name for p in tmp.iterdir() if p.name.startswith("thoughtloom-sbx-")]
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd").startswith(str(tmp)):
                found.append(f"process {proc.name}")
        except OSError:
            continue
    return found


def test_loom_solve_with_sleeping_programs_stops_at_the_wall_budget_and_kills_them(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    tests = tmp_path / "test_add.py"
    tests.write_text("assert add(2, 3) == 5\n")
    sandboxes = tmp_path / "tmp"
    sandboxes.mkdir()
    server.responder = sleeping_model
    started = time.monotonic()
    proc = loom("solve", "--task", "code", "--tests", str(tests), "--model",
                f"openai-compatible:{server.url}@scripted#completions", "--budget-seconds", "5",
                "--sandbox-timeout", "60", "--json", "--no-store", "write a function add(a, b) that returns the sum",
                env={"TMPDIR": str(sandboxes)}, timeout=scaled(120))
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["termination_reason"] == "budget_wall_s"
    # The budget includes the HTTP client's first import (seconds on a busy machine): 5 s leaves
    # room for the model's reply, so the sleeping programs were under test when the deadline came.
    assert out["stats"]["nodes"] > 1
    assert out["stats"]["wall_s"] < 5.8
    # The process's own start-up (the interpreter, imports) is outside the budget.
    assert wall < 12, f"a 5 s budget took {wall:.1f}s"
    assert out["answer"] is None  # no program finished its tests: nothing to answer with
    assert not leftovers(sandboxes)


def test_the_program_grounded_before_the_deadline_is_the_answer_when_another_is_still_sleeping(tmp_path: Path) -> None:
    tests = tmp_path / "test_add.py"
    tests.write_text("assert add(2, 3) == 5\n")
    task = get_task("code", TaskOptions(tests=tests, sandbox=SandboxLimits(timeout_s=60, cpu_s=60)))
    backend = ScriptedBackend(responder=lambda request, index: SLEEPER if index == 0 else CORRECT)
    gateway = Gateway(backend, Budget(BudgetLimits(wall_s=3)))
    started = time.monotonic()
    result = asyncio.run(search(task, "write a function add(a, b) that returns the sum", gateway,
                                SearchConfig(**task.search_defaults)))
    assert time.monotonic() - started < 4.5
    assert result.termination_reason == "budget_wall_s"
    assert result.answer is not None and "return a + b" in result.answer and "sleep" not in result.answer
    assert result.solved is True  # the final check ran after the deadline, in its own allowance
    # The sleeping program's thought was never scored: its check was cut off, not failed.
    sleeping = [n for n in result.graph if "sleep" in n.content]
    assert sleeping and all(n.score is None and n.status.value == "cancelled" for n in sleeping)


def test_reproducing_a_failure_that_hangs_stops_at_the_deadline(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_hang.py").write_text("import time\n\ndef test_hangs():\n    time.sleep(30)\n    assert False\n")
    task = DebugTask(repo=repo, failing_test="test_hang.py::test_hangs")
    gateway = Gateway(ScriptedBackend(), Budget(BudgetLimits(wall_s=2)))
    started = time.monotonic()
    result = asyncio.run(search(task, "it hangs", gateway, SearchConfig(**task.search_defaults)))
    assert time.monotonic() - started < 3.5
    assert result.termination_reason == "budget_wall_s"
    assert result.answer is None and result.usage.calls == 0


def test_a_run_cancelled_while_its_workdir_is_copied_leaves_no_workdir(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for d in range(40):
        (tree / f"d{d}").mkdir(parents=True)
        for f in range(50):
            (tree / f"d{d}" / f"f{f}.py").write_text("x = 1\n" * 20)
    base = tmp_path / "base"
    base.mkdir()
    sandbox = Sandbox(SandboxLimits(timeout_s=5), base_dir=base)

    async def cancel_during_copy() -> None:
        await sandbox.isolation()
        run = asyncio.ensure_future(sandbox.run([sandbox.python, "-c", "pass"], copy_from=tree))
        await asyncio.sleep(0.005)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        deadline = time.monotonic() + 20
        while list(base.iterdir()) and time.monotonic() < deadline:  # the copy ends in its thread
            await asyncio.sleep(0.05)

    asyncio.run(cancel_during_copy())
    assert list(base.iterdir()) == []


class SlowCheck(Game24):
    """Game of 24 whose final answer check hangs (as hidden tests of a hanging program would)."""

    async def acheck_answer(self, problem: Any, answer: str | None) -> bool | None:
        await asyncio.sleep(30)
        return True


def test_the_final_check_gets_an_allowance_as_long_as_the_budget_then_the_answer_is_unchecked() -> None:
    gateway = Gateway(ScriptedBackend(responder=game24_reply), Budget(BudgetLimits(wall_s=2)))
    started = time.monotonic()
    result = asyncio.run(search(SlowCheck(), "4 5 6 10", gateway, CONFIG))
    assert time.monotonic() - started < 4.5  # the search (milliseconds here), then at most 2 s of checking
    assert result.answer == "(5 * 6) - (10 - 4) = 24"
    assert result.solved is None and result.stats.answer_check == "timeout"
