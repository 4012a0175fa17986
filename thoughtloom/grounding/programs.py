"""Programs a model writes to compute an answer (program of thought), run in the sandbox for what they print.

A model that cannot add writes `total = 3 * 12 - 20` and `print(total)`; Python can. The program
runs as untrusted code (grounding/sandbox.py: no network, its own user and root, memory and time
limits, the standard library only), and what it prints last is its answer. A program that fails,
prints nothing or runs out of time has no answer, and says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .fences import fenced_blocks
from .once import RunOnce
from .sandbox import Sandbox, SandboxLimits
from .types import GroundingResult, Thought

#: An answer program's limits: arithmetic, not a workload.
PROGRAM_LIMITS = SandboxLimits(timeout_s=5.0, cpu_s=5, memory_mb=256, max_output_bytes=8192)


@dataclass(frozen=True, slots=True)
class ProgramAnswer:
    """What a program printed last (None when it gave no answer), and why not."""

    answer: str | None
    program: str
    why_not: str = ""


def program_text(reply: str) -> str:
    """The program in a reply: its first fenced block (a chat reply), else the reply as it is (a
    completion that began inside the fence and stopped at its end)."""
    opens_fenced = reply.lstrip().startswith(("```", "~~~"))
    for block in fenced_blocks(reply.splitlines()):
        if block.info in ("python", "py", "python3") or (block.info == "" and opens_fenced):
            return "\n".join(block.body).strip("\n")
    return reply.split("```", 1)[0].strip("\n")


async def run_answer_program(reply: str, sandbox: Sandbox | None = None) -> ProgramAnswer:
    """Run the program a reply holds and read its answer: the last line it printed."""
    program = program_text(reply)
    if not program.strip():
        return ProgramAnswer(None, program, "no program in the reply")
    box = sandbox if sandbox is not None else Sandbox(PROGRAM_LIMITS, site_packages=False)
    result = await box.run_python(program)
    if not result.ok:
        detail = result.stopped_reason or f"exit code {result.exit_code}"
        last = result.stderr.strip().splitlines()[-1:] or [""]
        return ProgramAnswer(None, program, f"the program failed ({detail}): {last[0][:200]}".rstrip(": "))
    answer = last_line(result.stdout)
    if answer is None:
        return ProgramAnswer(None, program, "the program printed nothing")
    return ProgramAnswer(answer, program)


def last_line(stdout: str) -> str | None:
    """A program's answer: the last non-empty line it printed, stripped; None when it printed nothing."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


class ProgramRuns:
    """Answer programs run once each: the same program text is not run again within one owner's life.

    A math task's thoughts are programs that several steps need the answer of (the vote among
    siblings, the grounder, the final answer); each is run once (grounding/once.py), at most
    `concurrency` at a time, and kept, up to `keep` of them.
    """

    def __init__(self, sandbox: Sandbox | None = None, *, concurrency: int = 2, keep: int = 4096) -> None:
        """sandbox: where programs run (None: PROGRAM_LIMITS, the standard library only)."""
        self._sandbox = sandbox if sandbox is not None else Sandbox(PROGRAM_LIMITS, site_packages=False)
        self._once: RunOnce[str, ProgramAnswer] = RunOnce(concurrency=concurrency, keep=keep)

    async def run(self, program: str) -> ProgramAnswer:
        """The program's answer, run now or earlier (a run under way is waited for, not repeated)."""
        return await self._once.get(program, lambda: run_answer_program(program, self._sandbox))

    def known(self, program: str) -> ProgramAnswer | None:
        """The answer of a program run already; None when it was not run (or was forgotten)."""
        return self._once.known(program)


class ProgramGrounder:
    """Runs a thought that is an answer program: verified when it prints an answer, failed when it does not."""

    def __init__(self, runs: ProgramRuns, *, name: str = "program") -> None:
        """runs: the runner the thought's task shares, so that a program is run once."""
        self.name = name
        self._runs = runs

    def can_ground(self, thought: Thought) -> bool:
        """Every thought of a program-writing task is a program."""
        return bool(thought.content.strip())

    async def ground(self, thought: Thought) -> GroundingResult:
        """Run the program in the sandbox and report what it printed, or why it printed nothing."""
        started = time.perf_counter()
        ran = await self._runs.run(thought.content)
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        if ran.answer is None:
            return GroundingResult(self.name, True, False, f"ran the program in the sandbox: {ran.why_not}",
                                   confidence=1.0, elapsed_ms=elapsed_ms, cost=1, failed=1)
        return GroundingResult(self.name, True, True, f"ran the program in the sandbox: it printed {ran.answer[:200]}",
                               confidence=1.0, elapsed_ms=elapsed_ms, cost=1, passed=1,
                               details={"printed": ran.answer[:200]})
