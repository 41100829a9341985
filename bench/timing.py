"""Timing one run of a child process: CPU of the whole process tree, and wall time."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """One run: CPU seconds of every child process reaped (user + system), and wall time.

    CPU time is the steadier measure on a shared 2-core machine: it leaves out waiting for the
    other core, though not the cost of cache and memory contention.
    """

    cpu_s: float
    wall_s: float


def timed(action: Callable[[], object]) -> Timing:
    """Run ``action`` (which runs and waits for child processes) and time it.

    CPU time is the growth of ``RUSAGE_CHILDREN`` around the call, so it counts every child
    reaped meanwhile: run nothing else in the background.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    action()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(cpu_s=cpu, wall_s=wall)
