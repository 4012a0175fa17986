"""How many CPU threads the embedded model computes with: a number the user fixed, or one adapted to the load.

llama.cpp splits each matrix product over its threads and waits for all of them at every step of
the graph (hundreds per token). When another process keeps a core busy, one of those threads is
descheduled now and then and the others wait for it, spinning: on 2 cores beside one CPU-bound
process, 2 threads ran a completion 1.6x slower than 1 thread did (BENCHMARKS.md, "Threads").
So by default the count follows the machine, re-read every second while the model works: every
core this process may use when the others are idle; beside busy processes, fewer threads for the
narrow decodes of generation and more for the wide ones that read prompts (threads_for says why).
The count changes nothing but speed: llama.cpp gives the same tokens whatever the thread count.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import ModelConfigError

#: The environment variable that sets the thread count when no option does: a number or "auto".
THREADS_ENV = "THOUGHTLOOM_THREADS"
AUTO = "auto"
#: Most threads anyone may ask for (a typo such as 80000 is refused, not attempted).
MAX_THREADS = 1024
#: Another process using this much of a core (or more) costs a thread: below it, a thread that is
#: sometimes descheduled still computes more than it makes the others wait (measured break-even
#: about 0.7 of a core on 2 cores).
BUSY_CORE = 0.6
#: How often the load is re-read while the model works (reading /proc/stat costs microseconds).
INTERVAL_S = 1.0
#: The shortest span a reading of the load is trusted over (shorter ones are mostly rounding).
MIN_SPAN_S = 0.2
#: A decode of at least this many rows (prompt chunks, many samples) has work enough for extra threads.
WIDE_ROWS = 32


def parse_threads(value: str | int | None, source: str = "--threads") -> int | None:
    """A thread setting as given (a number >= 1, or "auto"); None means adapt to the load."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        text = str(value).strip().lower()
        if text == AUTO:
            return None
        try:
            number = int(text)
        except ValueError:
            raise ModelConfigError(f"{source} {value!r} is not a number of threads; give a whole number "
                                   f"from 1 to {MAX_THREADS}, or auto") from None
    if not 1 <= number <= MAX_THREADS:
        raise ModelConfigError(f"{source} {number} is out of range; give a whole number from 1 to {MAX_THREADS}, "
                               "or auto")
    return number


def threads_setting(given: int | str | None, env: Mapping[str, str]) -> int | None:
    """The thread count to use: the one given (a number or "auto"), else $THOUGHTLOOM_THREADS, else None
    (adapt to the load)."""
    if given is not None:
        return parse_threads(given, "threads")
    value = env.get(THREADS_ENV)
    return parse_threads(value, THREADS_ENV) if value and value.strip() else None


def usable_cpus() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota when there is one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


@dataclass(frozen=True, slots=True)
class CpuSample:
    """CPU seconds the whole machine spent busy and this process spent, at one moment."""

    machine_busy_s: float
    own_s: float
    at_s: float


def read_cpu_sample() -> CpuSample | None:
    """The machine's busy CPU time (from /proc/stat) and this process's; None where /proc/stat is unreadable."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    # user nice system idle iowait irq softirq steal ...: idle and iowait are the only idle columns.
    values = [int(v) for v in fields[1:9]]
    busy = sum(values) - values[3] - (values[4] if len(values) > 4 else 0)
    own = os.times()
    return CpuSample(busy / ticks, own.user + own.system, time.monotonic())


def others_busy_cores(before: CpuSample, after: CpuSample) -> float:
    """Cores other processes kept busy between two samples (this process's own time taken out)."""
    span = after.at_s - before.at_s
    if span <= 0:
        return 0.0
    others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / span)


def threads_for(cpus: int, others: float, rows: int = 1) -> int:
    """Threads worth running for one decode of `rows` rows on `cpus` cores while other processes keep
    `others` cores busy.

    Idle: every core. Busy: a narrow decode (a few samples' next tokens: many short steps, each
    stalled whenever one of its threads is descheduled) runs on the cores the others leave; a wide
    one (a prompt being read: plenty of work per step) runs two more threads per busy core, at
    most twice the cores, so that a step split among more threads waits less for one that was
    descheduled (BENCHMARKS.md §12 measures the choices, and what the neighbour keeps).
    """
    busy = math.floor(others + (1 - BUSY_CORE))
    if busy <= 0:
        return cpus
    if rows >= WIDE_ROWS:
        return min(cpus + 2 * busy, 2 * cpus)
    return max(1, cpus - busy)


class ThreadPolicy(Protocol):
    """Decides how many threads each decode runs on (asked before every decode: must be cheap)."""

    def threads(self, rows: int) -> int:
        """The thread count for a decode of `rows` rows, now."""
        ...


@dataclass(frozen=True, slots=True)
class FixedThreads:
    """Always the same number of threads (the user's --threads N)."""

    count: int

    def threads(self, rows: int) -> int:
        """The fixed count, whatever the decode."""
        return self.count


class LoadAdaptiveThreads:
    """Threads for the load (threads_for), the load re-read every `interval_s` while the engine works.

    The first reading is taken when the policy is made (before the model loads); the first decision
    comes from the other processes' CPU time since then when at least `MIN_SPAN_S` passed (loading
    takes longer), else from the load average. Each later one comes from their time since the last
    reading, so the count follows a neighbour that starts or stops during a run.
    """

    def __init__(self, cpus: int | None = None, *, interval_s: float = INTERVAL_S,
                 sample: Callable[[], CpuSample | None] = read_cpu_sample,
                 loadavg: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cpus = cpus if cpus is not None else usable_cpus()
        self.interval_s = interval_s
        self._sample = sample
        self._loadavg = loadavg if loadavg is not None else _loadavg1
        self._clock = clock
        self._last = sample()
        #: Cores the other processes kept busy at the last reading (None: not read yet).
        self.others: float | None = None

    def threads(self, rows: int) -> int:
        """The count for a decode of `rows` rows under the load last read (re-read when due)."""
        if self.others is None:
            self.others = self._first_reading()
        elif self._last is not None and self._clock() - self._last.at_s >= self.interval_s:
            sample = self._sample()
            if sample is not None:
                self.others = others_busy_cores(self._last, sample)
                self._last = sample
        return threads_for(self.cpus, self.others, rows)

    def _first_reading(self) -> float:
        """Others' busy cores since the policy was made, else (too short a span) the load average."""
        last, now = self._last, self._sample()
        if last is not None and now is not None and now.at_s - last.at_s >= MIN_SPAN_S:
            self._last = now
            return others_busy_cores(last, now)
        return self._loadavg()  # this process was not running yet, so the whole load average is others'


def _loadavg1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def thread_policy(threads: int | None) -> ThreadPolicy:
    """The policy for a setting: a fixed count, or (None) adapting to the load."""
    return FixedThreads(threads) if threads is not None else LoadAdaptiveThreads()
