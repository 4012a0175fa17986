"""Programs compared by behaviour: probe calls made from the examples, values read through the runner's channel."""

from __future__ import annotations

from collections.abc import Sequence

from thoughtloom.grounding.behaviour import Behaviour, agreeing_groups, behaviour_of, probe_calls
from thoughtloom.grounding.code import CodeGrounder
from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits

TESTS = ("assert add(1, 2) == 3", "assert add(10, -4) == 6")


async def run_behaviour(program: str, tests: Sequence[str], probes: Sequence[str]) -> Behaviour:
    grounder = CodeGrounder(tests, Sandbox(SandboxLimits(timeout_s=10), site_packages=False), probes=probes)
    return behaviour_of(await grounder.run(program), len(tests))


def test_a_probe_changes_one_literal_argument_of_an_example_and_never_repeats_a_tested_call() -> None:
    probes = probe_calls(("assert f([1, 2, 3], 'ab') == 1",), "f")
    assert "f([3, 2, 1], 'ab')" in probes and "f([1, 2, 3], 'ba')" in probes
    assert "f([1, 2, 3], 'ab')" not in probes
    assert len(set(probes)) == len(probes)


def test_probes_take_each_example_in_turn_before_a_second_change_of_any() -> None:
    probes = probe_calls(TESTS, "add", limit=2)
    assert probes == ("add(2, 2)", "add(11, -4)")


def test_probes_are_capped() -> None:
    assert len(probe_calls(("assert f([5, 1, 4, 2, 3], 'hello', 12, 2.5) == 0",), "f", limit=4)) == 4


def test_calls_with_arguments_that_are_not_literals_give_no_probes() -> None:
    assert probe_calls(("assert f(g(1)) == 2", "x = 3\nassert f(x) == 3"), "f") == ()


def test_an_argument_too_long_for_a_quick_probe_is_left_out() -> None:
    assert probe_calls((f"assert f({list(range(3000))}) == 1",), "f") == ()


async def test_a_probe_reports_what_the_program_returned() -> None:
    ran = await run_behaviour("def add(a, b):\n    return a + b\n", TESTS, ("add(2, 2)", "add(1, 3)"))
    assert ran.passes and ran.passed == 2
    assert ran.signature == ("4", "4")


async def test_a_probe_that_raises_is_compared_by_the_kind_of_error_not_its_message() -> None:
    ran = await run_behaviour("def f(x):\n    raise ValueError(f'bad {x}')\n", (), ("f(1)", "f(2)"))
    assert ran.signature == ("!ValueError", "!ValueError")


async def test_floats_sets_and_dicts_are_compared_by_value() -> None:
    one = "def f(x):\n    return [0.1 + 0.2, {'b', 'a'}, {'y': 1, 'x': 2}]\n"
    other = "def f(x):\n    d = {}\n    d['x'] = 2\n    d['y'] = 1\n    return [0.3, {'a', 'b'}, d]\n"
    first, second = [await run_behaviour(p, (), ("f(1)",)) for p in (one, other)]
    assert first.signature == second.signature


async def test_a_program_cannot_write_the_value_a_probe_reports() -> None:
    forged = "__value__ = '99'\ndef add(a, b):\n    print('__value__ = 99')\n    return a + b\n"
    ran = await run_behaviour(forged, (), ("add(2, 2)",))
    assert ran.signature == ("4",)


async def test_a_program_failing_a_visible_test_does_not_pass() -> None:
    ran = await run_behaviour("def add(a, b):\n    return 3\n", TESTS, ("add(2, 2)",))
    assert not ran.passes and (ran.passed, ran.failed) == (1, 1)


def test_groups_of_alike_programs_come_heaviest_first_then_earliest() -> None:
    signatures = [("1",), ("2",), ("2",), ("3",), ("1",)]
    assert agreeing_groups(signatures, [1, 1, 1, 1, 1]) == [[0, 4], [1, 2], [3]]
    assert agreeing_groups(signatures, [1, 1, 1, 3, 1]) == [[3], [0, 4], [1, 2]]
