"""How torch's worker threads wait between two parallel regions: spin briefly, or sleep at once.

A pass over a short text is hundreds of short parallel regions (a few multiplies per layer). A
worker that sleeps between them must be woken for the next one, which costs a virtual CPU up to
a few hundred microseconds: passes of 10-100 rows ran 20-25% slower here with sleeping workers
(OMP_WAIT_POLICY=PASSIVE) than with workers that spin for ~0.1 ms first. But when other programs
keep the cores busy, a spinning worker takes the time the working one needs: `explain` then ran
30% slower with a 0.1 ms spin and 2× slower with a 1 ms one, and 4-5× slower with libgomp's
default of ~3 ms (measured: 22 s against 5 s on 2 busy cores). So the CLI
looks at how many other tasks are running, just before torch starts its threads: workers spin
briefly on an idle machine and sleep at once on a busy one. A value the user set wins.

The settings are environment variables that libgomp reads once, when torch is imported.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

#: Iterations a waiting worker spins before it sleeps, on an idle machine (~0.1 ms here).
SPIN = 10_000
#: Where Linux tells how many tasks are running now ("0.84 0.96 1.25 RUNNING/TOTAL LAST_PID").
LOADAVG = "/proc/loadavg"


def choose(env: Mapping[str, str], others: int | None, cpus: int) -> dict[str, str]:
    """The variables to set: {} when the user set either one, else spin on an idle machine.

    others: tasks running besides this one (None: unknown); cpus: CPUs this process may use.
    An idle machine is one whose other running tasks leave at least half the CPUs free.

    >>> choose({}, 0, 2)
    {'GOMP_SPINCOUNT': '10000'}
    >>> choose({}, 1, 2)
    {'OMP_WAIT_POLICY': 'PASSIVE'}
    >>> choose({"OMP_WAIT_POLICY": "ACTIVE"}, 0, 2)
    {}
    """
    if "OMP_WAIT_POLICY" in env or "GOMP_SPINCOUNT" in env:
        return {}
    if others is not None and others < max(1, cpus // 2):
        return {"GOMP_SPINCOUNT": str(SPIN)}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


def others_running(read: Callable[[], str] | None = None, samples: int = 5, gap_s: float = 0.001) -> int | None:
    """Tasks running besides this one: the least of a few readings of /proc/loadavg ~1 ms apart
    (a reading also counts short-lived tasks that happen to run then). None where it cannot be read.

    >>> others_running(lambda: "0.10 0.20 0.30 3/120 4242", samples=1)
    2
    """
    read = read or _read_loadavg
    counts = []
    for i in range(samples):
        if i:
            time.sleep(gap_s)
        try:
            counts.append(int(read().split()[3].split("/")[0]) - 1)  # this process is one of them
        except (OSError, ValueError, IndexError):
            return None
    return max(0, min(counts))


def _read_loadavg() -> str:
    with open(LOADAVG) as f:
        return f.read()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def set_wait_policy() -> dict[str, str]:
    """Choose how torch's workers wait, before torch is imported; returns what was set (nothing
    once torch is imported: its libgomp has read its settings, and children should not inherit
    a choice made for another moment)."""
    if "torch" in sys.modules:
        return {}
    chosen = choose(os.environ, others_running(), _cpus())
    os.environ.update(chosen)
    return chosen
