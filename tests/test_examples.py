"""The examples/ folder runs as a user would run it (python examples/NAME.py), so CI keeps them working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from machine import scaled

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run one example script from a temporary working directory, importing this checkout's thoughtloom."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], check=False, capture_output=True, text=True,
                          timeout=scaled(300), env=env, cwd=EXAMPLES)


def test_every_example_is_run_by_this_file() -> None:
    tested = {"custom_task.py", "api_events.py", "greedy_strategy.py"}  # greedy: tests/test_strategy_plugins.py
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_the_custom_task_example_reaches_its_target() -> None:
    proc = run_example("custom_task.py")
    assert proc.returncode == 0, proc.stderr
    assert "answer: 3 + 1 = 4; 4 + 1 = 5; 5 * 2 = 10" in proc.stdout
    assert "stopped: goal_reached" in proc.stdout


def test_the_api_events_example_sees_repairs_the_goal_and_the_stop() -> None:
    proc = run_example("api_events.py")
    assert proc.returncode == 0, proc.stderr
    assert "repaired thought" in proc.stdout and "corrected to" in proc.stdout
    assert "goal found at thought" in proc.stdout
    assert "stopped: goal_reached" in proc.stdout
    assert "'search_started': 1" in proc.stdout


def test_the_custom_task_checks_answers_exactly() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        from custom_task import ReachTask
    finally:
        sys.path.remove(str(EXAMPLES))
    task = ReachTask()
    problem = task.parse_problem("3 10")
    assert task.check_answer(problem, "3 + 1 = 4; 4 + 1 = 5; 5 * 2 = 10")
    assert not task.check_answer(problem, "3 + 1 = 4; 4 * 2 = 8")
    assert not task.check_answer(problem, "3 + 1 = 5; 5 * 2 = 10")  # a wrong sum is not an answer
