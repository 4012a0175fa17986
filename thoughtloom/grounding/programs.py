"""Programs a model writes to compute an answer (program of thought), run in the sandbox for what they print.

A model that cannot add writes `total = 3 * 12 - 20` and `print(total)`; Python can. The program
runs as untrusted code (grounding/sandbox.py: no network, its own user and root, memory and time
limits, the standard library only), and what it prints last is its answer. A program that fails,
prints nothing or runs out of time has no answer, and says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fences import fenced_blocks
from .sandbox import Sandbox, SandboxLimits

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
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        return ProgramAnswer(None, program, "the program printed nothing")
    return ProgramAnswer(lines[-1], program)
