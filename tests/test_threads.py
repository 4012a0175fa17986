"""The embedded model's thread count: the setting's sources, the load-following default, and its effect."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from machine import scaled

from thoughtloom.llm.errors import ModelConfigError
from thoughtloom.llm.threads import (
    THREADS_ENV,
    WIDE_ROWS,
    CpuSample,
    FixedThreads,
    LoadAdaptiveThreads,
    others_busy_cores,
    parse_threads,
    read_cpu_sample,
    thread_policy,
    threads_for,
    threads_setting,
    usable_cpus,
)

ROOT = Path(__file__).resolve().parents[1]


# --- the setting ----------------------------------------------------------------------------------

def test_a_number_of_threads_is_taken_as_given() -> None:
    assert parse_threads("3") == 3
    assert parse_threads(2) == 2


def test_auto_means_following_the_load() -> None:
    assert parse_threads("auto") is None
    assert parse_threads(" AUTO ") is None


@pytest.mark.parametrize("bad", ["0", "-1", "1025", "two", "1.5", ""])
def test_a_bad_thread_count_is_one_line_naming_its_source(bad: str) -> None:
    with pytest.raises(ModelConfigError) as err:
        parse_threads(bad, THREADS_ENV)
    assert str(err.value).startswith(THREADS_ENV)
    assert "\n" not in str(err.value)


def test_the_given_setting_wins_over_the_environment() -> None:
    assert threads_setting(1, {THREADS_ENV: "4"}) == 1
    assert threads_setting("auto", {THREADS_ENV: "4"}) is None


def test_the_environment_sets_the_count_when_nothing_is_given() -> None:
    assert threads_setting(None, {THREADS_ENV: "3"}) == 3
    assert threads_setting(None, {THREADS_ENV: "auto"}) is None
    assert threads_setting(None, {}) is None
    assert threads_setting(None, {THREADS_ENV: " "}) is None


def test_a_bad_environment_value_is_refused() -> None:
    with pytest.raises(ModelConfigError, match=THREADS_ENV):
        threads_setting(None, {THREADS_ENV: "many"})


def test_usable_cpus_is_at_least_one_and_at_most_the_machine() -> None:
    import os

    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


# --- the load-following default ---------------------------------------------------------------------

@pytest.mark.parametrize(("cpus", "others", "threads"), [
    (2, 0.0, 2), (2, 0.5, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 3.0, 1), (4, 1.0, 3), (4, 2.7, 1), (1, 0.0, 1),
])
def test_each_core_other_processes_keep_busy_costs_a_narrow_decode_a_thread(cpus: int, others: float,
                                                                           threads: int) -> None:
    assert threads_for(cpus, others, rows=1) == threads


@pytest.mark.parametrize(("cpus", "others", "threads"), [
    (2, 0.0, 2), (2, 0.5, 2), (2, 1.0, 4), (2, 3.0, 4), (4, 1.0, 6), (8, 1.0, 10), (1, 1.0, 2),
])
def test_a_wide_decode_beside_busy_cores_runs_more_threads_at_most_twice_the_cores(cpus: int, others: float,
                                                                                  threads: int) -> None:
    assert threads_for(cpus, others, rows=WIDE_ROWS) == threads


def test_others_busy_cores_leaves_out_this_process_own_time() -> None:
    before = CpuSample(machine_busy_s=100.0, own_s=10.0, at_s=0.0)
    after = CpuSample(machine_busy_s=103.0, own_s=12.0, at_s=2.0)  # 3 busy seconds, 2 of them ours
    assert others_busy_cores(before, after) == pytest.approx(0.5)


class ScriptedMachine:
    """CPU samples of a machine whose other processes keep `others` cores busy, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 0.0
        self.others = 0.0

    def advance(self, seconds: float) -> None:
        self.busy += self.others * seconds
        self.now += seconds

    def sample(self) -> CpuSample:
        return CpuSample(self.busy, 0.0, self.now)


@pytest.fixture
def machine() -> ScriptedMachine:
    return ScriptedMachine()


def adaptive(machine: ScriptedMachine, loadavg: float = 0.0) -> LoadAdaptiveThreads:
    return LoadAdaptiveThreads(2, interval_s=1.0, sample=machine.sample, loadavg=lambda: loadavg,
                               clock=lambda: machine.now)


def test_the_first_count_comes_from_the_load_while_the_model_loaded(machine: ScriptedMachine) -> None:
    policy = adaptive(machine, loadavg=1.5)  # a neighbour that has just stopped still weighs on the average
    machine.advance(0.8)  # loading the model
    assert policy.threads(1) == 2


def test_a_neighbour_busy_while_the_model_loaded_costs_a_thread_at_once(machine: ScriptedMachine) -> None:
    policy = adaptive(machine, loadavg=0.0)
    machine.others = 1.0
    machine.advance(0.8)
    assert policy.threads(1) == 1


def test_without_a_long_enough_reading_the_first_count_comes_from_the_load_average(machine: ScriptedMachine) -> None:
    assert adaptive(machine, loadavg=0.1).threads(1) == 2
    assert adaptive(machine, loadavg=1.2).threads(1) == 1


def test_the_load_is_not_read_again_within_the_interval(machine: ScriptedMachine) -> None:
    policy = adaptive(machine)
    machine.advance(0.5)
    assert policy.threads(1) == 2
    machine.others = 1.0
    machine.advance(0.5)
    assert policy.threads(1) == 2


def test_a_neighbour_that_starts_costs_a_thread_and_one_that_stops_gives_it_back(machine: ScriptedMachine) -> None:
    policy = adaptive(machine)
    machine.advance(0.5)
    assert policy.threads(1) == 2
    machine.others = 1.0
    machine.advance(1.0)
    assert policy.threads(1) == 1
    assert policy.threads(WIDE_ROWS) == 4  # the same reading: a wide decode runs more
    machine.others = 0.0
    machine.advance(1.0)
    assert policy.threads(1) == 2


def test_a_fixed_count_never_changes() -> None:
    policy = thread_policy(3)
    assert isinstance(policy, FixedThreads)
    assert policy.threads(1) == policy.threads(WIDE_ROWS) == 3


def test_no_setting_follows_the_load() -> None:
    assert isinstance(thread_policy(None), LoadAdaptiveThreads)


@pytest.fixture
def spinning_neighbour() -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.5)
    yield
    proc.kill()
    proc.wait()


@pytest.mark.skipif(read_cpu_sample() is None, reason="no /proc/stat here")
def test_a_real_spinning_neighbour_is_seen_as_a_busy_core(spinning_neighbour: None) -> None:
    before = read_cpu_sample()
    time.sleep(1.0)
    after = read_cpu_sample()
    assert before is not None and after is not None
    # The neighbour had a core to itself or shared one with whatever else runs: at least most of one.
    assert others_busy_cores(before, after) >= 0.6


# --- the options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["solve", "x"], ["agent", "x"], ["research", "x"], ["bench"], ["serve"],
                                     ["resume", "abc"]])
def test_every_command_that_runs_a_model_refuses_a_bad_threads_option_in_one_line(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "thoughtloom", *command, "--threads", "0"], capture_output=True,
                          text=True, cwd=ROOT, check=False, timeout=scaled(120))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "--threads 0 is out of range" in done.stderr


def test_a_bad_threads_variable_is_refused_before_the_run_starts(tmp_path: Path) -> None:
    import os

    env = {**os.environ, THREADS_ENV: "lots"}
    done = subprocess.run([sys.executable, "-m", "thoughtloom", "solve", "--task", "game24", "4 5 6 10",
                           "--store", str(tmp_path / "runs.db")], capture_output=True, text=True, cwd=ROOT,
                          env=env, check=False, timeout=scaled(120))
    assert done.returncode == 2
    assert done.stderr.strip() == f"loom: error: {THREADS_ENV} 'lots' is not a number of threads; give a whole " \
                                  "number from 1 to 1024, or auto"
    assert not (tmp_path / "runs.db").exists()  # nothing was stored for a run that could not start


# --- the real engine ---------------------------------------------------------------------------------

class Alternating:
    """A thread policy that changes the count at every decode: 1, 2, 1, 2, ..."""

    def __init__(self) -> None:
        self.count = 2

    def threads(self, rows: int) -> int:
        self.count = 3 - self.count
        return self.count


@pytest.mark.local_model
def test_changing_the_thread_count_between_decodes_changes_no_token() -> None:
    from thoughtloom.llm.llama_engine import Engine
    from thoughtloom.llm.local import LocalLlamaBackend, _import_llama_cpp, embedded_model_path
    from thoughtloom.llm.models import GEMMA_3_270M
    from thoughtloom.llm.types import GenerateRequest, Prompt

    fixed = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=512)  # shared with the other Gemma tests
    text = "Country: France\nCapital: Paris\n\nCountry: Japan\nCapital: Tokyo\n\nCountry: Peru\nCapital:"
    want = asyncio.run(fixed.generate(GenerateRequest(Prompt(text=text), n=2, max_tokens=24, temperature=0.9, seed=3)))
    moving = Engine(_import_llama_cpp(), embedded_model_path(GEMMA_3_270M), 512, Alternating())
    try:
        got = moving.complete(fixed.prompt_tokens(Prompt(text=text)), [3, 4], 24, 0.9).future.result(120)
        assert tuple(got.texts) == want.texts
        assert moving.stats.thread_changes >= 10
    finally:
        moving.close()
