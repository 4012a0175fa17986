"""Timeouts that scale with the machine the suite runs on, and with what else runs on it.

A timeout in a test is a guard against a hang, not a speed test (speed is measured by
benchmarks/). The numbers written in the tests are for an idle 2-core machine; `scaled` stretches
them by how much slower this machine computes (a short calibration, once per session) and by how
busy it is right now (the load average per usable core), so a suite run beside other work, or on a
slower machine, waits longer instead of failing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time

#: Seconds the calibration takes on the idle 2-core machine the timeouts were written on.
REFERENCE_S = 0.06


@functools.cache
def speed_factor() -> float:
    """How many times slower than the reference machine this one computes (at least 1), measured once."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        data = b"thoughtloom"
        for _ in range(60_000):
            data = hashlib.sha256(data).digest()
        best = min(best, time.perf_counter() - start)
    return max(1.0, best / REFERENCE_S)


def load_factor() -> float:
    """1 on an idle machine, more as other work keeps its cores busy (the one-minute load average)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return 1.0 + load / max(1, cpus)


def scaled(seconds: float) -> float:
    """A timeout written for an idle reference machine, for this machine as loaded as it is now."""
    return seconds * speed_factor() * load_factor()
