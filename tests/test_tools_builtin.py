"""The built-in tools on real parts: exact arithmetic, the real sandbox, a real FTS5 index over a
temporary folder, and file reading confined to its folders on a real file system."""

from __future__ import annotations

import os
import time
from decimal import Decimal
from pathlib import Path

import pytest

from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits
from thoughtloom.grounding.arith import ExpressionError, NumberTooLarge, evaluate
from thoughtloom.tools import ToolConfigError, ToolError
from thoughtloom.tools.builtin import MAX_LINE_CHARS, SNIFF_BYTES, CalcTool, DocsTool, FilesTool, PythonTool
from thoughtloom.tools.toolbox import ToolLimits, Toolbox

# ---------------------------------------------------------------------------- calc


async def calc(expression: str) -> str:
    return await CalcTool().call({"expression": expression})


async def test_calc_answers_exactly_with_the_expression() -> None:
    assert await calc("12*7.5") == "12*7.5 = 90"


async def test_calc_keeps_a_fraction_and_shows_its_decimal() -> None:
    assert await calc("10/4") == "10/4 = 5/2 (2.5)"


async def test_calc_marks_a_rounded_decimal_approximation() -> None:
    assert await calc("1/3") == "1/3 = 1/3 (≈0.333333333333)"


async def test_calc_decimals_do_not_pick_up_float_error() -> None:
    assert await calc("0.1 + 0.2") == "0.1 + 0.2 = 3/10 (0.3)"


async def test_calc_reads_a_long_decimal_as_written_not_as_a_float() -> None:
    assert await calc("0.12345678901234567891 * 10^20") == "0.12345678901234567891 * 10^20 = 12345678901234567891"


async def test_calc_powers_are_exact_including_negative_exponents() -> None:
    assert await calc("2**100 * (1/2)^-2") == "2**100 * (1/2)^-2 = 5070602400912917605986812821504"


async def test_calc_refuses_names_and_calls_without_evaluating_them() -> None:
    with pytest.raises(ToolError, match="unsupported element"):
        await calc("__import__('os').getcwd()")


async def test_calc_refuses_a_power_too_large_to_compute() -> None:
    with pytest.raises(ToolError, match="too large"):
        await calc("9**9**9")


async def test_calc_division_by_zero_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="division by zero"):
        await calc("1/(3-3)")


#: The bases of the slow expressions of issue 34, each power just inside the power limit.
_PRIMES = [p for p in range(3, 1000) if all(p % d for d in range(2, int(p**0.5) + 1))]


def _longest(terms: list[str], sep: str) -> str:
    """As many terms as fit in the calculator's 999 characters."""
    out = terms[0]
    for term in terms[1:]:
        if len(out + sep + term) > 999:
            break
        out += sep + term
    return out


#: Expressions of up to 999 characters that took 8-70 s on the event loop: a sum of fractions whose
#: denominators multiply, a product of big powers, and a chain of big fractions.
SLOW_EXPRESSIONS = [
    _longest([f"1/{p}**{100_000 // p.bit_length()}" for p in _PRIMES], "+"),
    _longest([f"{p}**{100_000 // p.bit_length()}" for p in _PRIMES], "*"),
    _longest([f"({p}**{100_000 // p.bit_length()}+1)/({p + 2}**{50_000 // p.bit_length()}+1)" for p in _PRIMES], "*"),
]


@pytest.mark.parametrize("expression", SLOW_EXPRESSIONS, ids=["fraction_sum", "power_product", "fraction_chain"])
async def test_calc_refuses_an_expression_whose_numbers_grow_too_large_in_one_line_at_once(expression: str) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match="too large to compute exactly") as refused:
        await calc(expression)
    assert time.monotonic() - started < 10  # a hang guard: it took 8-70 s before each step was bounded
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


async def test_calc_prints_a_power_longer_than_pythons_own_digit_limit() -> None:
    answer = await calc("2**20000")
    digits = answer.removeprefix("2**20000 = ")
    assert len(digits) == 6021 and digits == str(Decimal(2**20000))


async def test_calc_prints_a_fraction_of_long_numbers_with_its_decimal() -> None:
    answer = await calc("1/3**10000")
    assert answer.startswith("1/3**10000 = 1/1631350185342625874") and answer.endswith("E-4772)")


#: One of the slowest expressions within the limits: 36 sums of ~30,000-bit fractions, ~0.5 s on an idle 2-core machine.
HEAVY = "(3**20000+1)/(5**13800+1)" + "".join(f"{op}(7**11200+1)/(11**9000+1)" for op in "+-" * 18)


async def test_a_calculation_longer_than_the_tool_timeout_is_cut_at_the_timeout() -> None:
    box = Toolbox([CalcTool()], ToolLimits(timeout_s=0.05))
    result = await box.call("calc", {"expression": HEAVY})
    assert result.status == "timeout", result  # computed on the event loop, it could not be cut


def test_arithmetic_refuses_a_step_beyond_the_bit_limit_before_computing_it() -> None:
    with pytest.raises(NumberTooLarge):
        evaluate(" * ".join(["9" * 1000] * 40))  # 40 numbers of 3,322 bits: 132,877 bits


def test_arithmetic_stops_at_its_next_step_when_asked() -> None:
    with pytest.raises(ExpressionError, match="stopped"):
        evaluate("1 + 2 * 3", stop=lambda: True)


def test_game24_arithmetic_still_refuses_powers() -> None:
    with pytest.raises(ExpressionError):
        evaluate("2**3 * 3")


# --------------------------------------------------------------------------- python


@pytest.fixture(scope="module")
def python_tool() -> PythonTool:
    """One sandbox for the module (its isolation is probed once), with a short wall clock."""
    return PythonTool(Sandbox(SandboxLimits(timeout_s=2, cpu_s=2, memory_mb=512)))


async def test_python_answers_with_what_the_program_printed(python_tool: PythonTool) -> None:
    assert await python_tool.call({"code": "print(sum(range(10)))"}) == "45\n"


async def test_python_failing_exit_is_an_error_even_when_it_prints_tests_passed(python_tool: PythonTool) -> None:
    with pytest.raises(ToolError, match=r"^exit status 1"):
        await python_tool.call({"code": "import sys\nprint('tests passed')\nprint('OK', file=sys.stderr)\nsys.exit(1)"})


async def test_python_error_is_the_last_line_of_the_traceback(python_tool: PythonTool) -> None:
    with pytest.raises(ToolError) as err:
        await python_tool.call({"code": "def f():\n    raise KeyError('loom')\nf()"})
    assert str(err.value) == "exit status 1: KeyError: 'loom'"


async def test_python_syntax_error_is_reported_without_running(python_tool: PythonTool) -> None:
    with pytest.raises(ToolError, match="stopped: syntax error; SyntaxError: line 1"):
        await python_tool.call({"code": "print("})


async def test_python_run_past_the_sandbox_clock_is_stopped(python_tool: PythonTool) -> None:
    with pytest.raises(ToolError, match="stopped: timeout"):
        await python_tool.call({"code": "while True:\n    pass"})


# ----------------------------------------------------------------------------- docs


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "water.md").write_text(
        "# Water\n\nWater boils at 100 degrees Celsius at sea level.\n\nIt freezes at 0 degrees.\n", encoding="utf-8")
    (folder / "looms.txt").write_text("A loom weaves the weft through the warp.\n", encoding="utf-8")
    with KnowledgeBase.open(folder) as base:
        yield base


async def test_docs_answers_numbered_passages_with_file_and_lines(kb: KnowledgeBase) -> None:
    out = await DocsTool(kb).call({"query": "boiling water"})
    assert out.splitlines()[:2] == ["1. water.md:3", "Water: Water boils at 100 degrees Celsius at sea level."]


async def test_docs_limit_caps_the_passages(kb: KnowledgeBase) -> None:
    out = await DocsTool(kb).call({"query": "water degrees", "limit": 1})
    assert out.startswith("1. water.md:") and "\n2. " not in out


async def test_docs_says_when_nothing_matches(kb: KnowledgeBase) -> None:
    assert (await DocsTool(kb).call({"query": "volcano"})).startswith("no passage matches 'volcano'")


# ---------------------------------------------------------------------------- files


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ holds notes.txt, a subfolder and links; secret.txt sits beside root/, outside it."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)), encoding="utf-8")
    (root / "sub" / "deep.md").write_text("deep\n", encoding="utf-8")
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (tmp_path / "secret.txt").write_text("the secret\n", encoding="utf-8")
    os.symlink(tmp_path / "secret.txt", root / "escape.txt")
    os.symlink(tmp_path, root / "parent")
    os.symlink(root / "sub" / "deep.md", root / "inside.md")
    return root


async def test_files_reads_relative_to_the_first_root_with_line_numbers(tree: Path) -> None:
    out = await FilesTool([tree]).call({"path": "sub/deep.md"})
    assert out == "sub/deep.md lines 1-1:\n1\tdeep"


async def test_files_refuses_a_dotdot_escape(tree: Path) -> None:
    with pytest.raises(ToolError, match=r"refused: \.\./secret\.txt resolves to .*secret\.txt, outside the allowed folders"):
        await FilesTool([tree]).call({"path": "../secret.txt"})


async def test_files_refuses_a_symlink_that_points_out_of_the_root(tree: Path) -> None:
    with pytest.raises(ToolError, match="refused: escape.txt resolves to"):
        await FilesTool([tree]).call({"path": "escape.txt"})


async def test_files_refuses_a_path_through_a_symlinked_folder_out_of_the_root(tree: Path) -> None:
    with pytest.raises(ToolError, match="refused"):
        await FilesTool([tree]).call({"path": "parent/secret.txt"})


async def test_files_follows_a_symlink_that_stays_inside_the_root(tree: Path) -> None:
    assert (await FilesTool([tree]).call({"path": "inside.md"})).endswith("1\tdeep")


async def test_files_refuses_an_absolute_path_outside_every_root(tree: Path) -> None:
    with pytest.raises(ToolError, match="refused: /etc/passwd"):
        await FilesTool([tree]).call({"path": "/etc/passwd"})


async def test_files_reads_a_second_root_by_absolute_path(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.txt").write_text("bee\n", encoding="utf-8")
    assert (await FilesTool([tree, other]).call({"path": str(other / "b.txt")})).endswith("1\tbee")


async def test_files_refuses_a_binary_file(tree: Path) -> None:
    with pytest.raises(ToolError, match="blob.bin is a binary file"):
        await FilesTool([tree]).call({"path": "blob.bin"})


async def test_files_caps_lines_and_says_where_to_go_on(tree: Path) -> None:
    out = await FilesTool([tree]).call({"path": "notes.txt", "start_line": 4, "max_lines": 3})
    assert out == "notes.txt lines 4-6:\n4\tline 4\n5\tline 5\n6\tline 6\n[more lines follow: start_line=7]"


async def test_files_cuts_a_very_long_line(tree: Path) -> None:
    (tree / "wide.txt").write_text("x" * (MAX_LINE_CHARS + 50) + "\n", encoding="utf-8")
    out = await FilesTool([tree]).call({"path": "wide.txt"})
    assert out.endswith("x" * 10 + " [line cut]")


async def test_files_lists_a_folder(tree: Path) -> None:
    out = await FilesTool([tree]).call({"path": "."})
    assert out.splitlines() == ["./ (6 entries)", "blob.bin", "escape.txt@", "inside.md@", "notes.txt", "parent@", "sub/"]


@pytest.mark.timeout(20)
async def test_files_refuses_a_fifo_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "pipe.txt")
    with pytest.raises(ToolError, match=r"pipe.txt is a pipe \(FIFO\), not a regular file"):
        await FilesTool([tree]).call({"path": "pipe.txt"})


async def test_files_lists_a_name_that_is_not_utf8_escaped(tree: Path) -> None:
    with open(os.fsencode(tree) + b"/\xff.txt", "wb") as fh:
        fh.write(b"text\n")
    out = await FilesTool([tree]).call({"path": "."})
    out.encode("utf-8")  # the reply is stored and sent to a model: it must be valid text
    assert "\\xff.txt" in out.splitlines()


async def test_files_reads_a_huge_one_line_file_in_bounded_memory(tree: Path) -> None:
    import tracemalloc

    with (tree / "huge.txt").open("wb") as fh:
        fh.write(b"x" * (2 * SNIFF_BYTES))  # text first, so it is not taken for a binary file
        fh.truncate(300 * 1024 * 1024)  # sparse: one 300 MB line
    tracemalloc.start()
    try:
        out = await FilesTool([tree]).call({"path": "huge.txt"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.startswith("huge.txt lines 1-1:\n1\txxx") and "[line cut]" in out
    assert peak < 8 * 1024 * 1024


async def test_files_needs_an_existing_folder() -> None:
    with pytest.raises(ToolConfigError, match="is not a folder"):
        FilesTool(["/nonexistent/thoughtloom-root"])


async def test_files_reports_a_symlink_loop_as_a_tool_error(tree: Path) -> None:
    os.symlink(tree / "loop-b", tree / "loop-a")
    os.symlink(tree / "loop-a", tree / "loop-b")
    with pytest.raises(ToolError, match="loop-a"):
        await FilesTool([tree]).call({"path": "loop-a"})


async def test_the_calculator_reads_sums_written_with_units_and_checks_the_stated_result() -> None:
    calc = CalcTool()
    assert await calc.call({"expression": "2 x 150 EUR = 300 EUR"}) == "2 * 150 = 300; the stated 300 is right"
    assert await calc.call({"expression": "1,200 + 300 = 1,600"}) == "1200 + 300 = 1500; the stated 1600 is WRONG"
    assert await calc.call({"expression": "24.00 * 2 bus"}) == "24.00 * 2 = 48"
