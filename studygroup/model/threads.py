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

A server (`studygroup serve`) sleeps at once, whatever the machine does when it starts: its
passes share the cores with the browser that asks for them and draws their answers, all through
its long life. The page's redraw after a silencing (bench/silence_redraw.py's requests to a
server in a process of its own, 2 cores, load average ~3) took 0.43 s with sleeping workers,
0.64 s with a ~0.1 ms spin and 1.7 s with libgomp's default.

The settings are environment variables that libgomp reads once, when torch is imported. The
CLI sets them before it imports torch; the library at its first use (`studygroup.load`, ...),
unless `STUDYGROUP_THREAD_POLICY=off`. Where torch came first, the first pass says what to do.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

#: Iterations a waiting worker spins before it sleeps, on an idle machine (~0.1 ms here).
SPIN = 10_000
#: The variables a user sets to choose how the workers wait; either one wins over our choice.
VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
#: `STUDYGROUP_THREAD_POLICY=off` leaves the workers as torch starts them, and says nothing.
SWITCH = "STUDYGROUP_THREAD_POLICY"
#: Said once, at the first pass, when torch started its workers before a policy was set.
HINT = ("studygroup: torch was imported before studygroup.load, so its threads spin between passes "
        "(2-10x slower on short texts): call studygroup.load before importing torch or a studygroup submodule, "
        "or set OMP_WAIT_POLICY=passive (STUDYGROUP_THREAD_POLICY=off: no message)")
#: Where Linux tells how many tasks are running now ("0.84 0.96 1.25 RUNNING/TOTAL LAST_PID").
LOADAVG = "/proc/loadavg"


def choose(env: Mapping[str, str], others: int | None, cpus: int, serving: bool = False) -> dict[str, str]:
    """The variables to set: {} when the user set either one, else spin on an idle machine.

    others: tasks running besides this one (None: unknown); cpus: CPUs this process may use.
    An idle machine is one whose other running tasks leave at least half the CPUs free.
    serving: for `studygroup serve`, whose workers sleep at once (see above).

    >>> choose({}, 0, 2)
    {'GOMP_SPINCOUNT': '10000'}
    >>> choose({}, 1, 2)
    {'OMP_WAIT_POLICY': 'PASSIVE'}
    >>> choose({}, 0, 2, serving=True)
    {'OMP_WAIT_POLICY': 'PASSIVE'}
    >>> choose({"OMP_WAIT_POLICY": "ACTIVE"}, 0, 2)
    {}
    """
    if any(name in env for name in VARIABLES):
        return {}
    if not serving and others is not None and others < max(1, cpus // 2):
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


def set_wait_policy(serving: bool = False) -> dict[str, str]:
    """Choose how torch's workers wait, before torch is imported; returns what was set (nothing
    once torch is imported: its libgomp has read its settings, and children should not inherit
    a choice made for another moment). serving: for `studygroup serve` (see above)."""
    if "torch" in sys.modules:
        return {}
    chosen = choose(os.environ, None if serving else others_running(), _cpus(), serving)
    os.environ.update(chosen)
    return chosen


def turned_off(env: Mapping[str, str]) -> bool:
    """Whether the user asked studygroup to leave the workers alone (STUDYGROUP_THREAD_POLICY=off).

    >>> turned_off({"STUDYGROUP_THREAD_POLICY": "OFF"}), turned_off({})
    (True, False)
    """
    return env.get(SWITCH, "").strip().lower() == "off"


def at_first_use() -> dict[str, str]:
    """The library's first use (never the bare import): set_wait_policy(), unless turned off."""
    return {} if turned_off(os.environ) else set_wait_policy()


_told = False


def tell_once_if_spinning(device_type: str = "cpu", stream=None) -> bool:
    """At a pass on the CPU: once per process, one line on stderr (`HINT`) when torch's workers were
    started with no wait policy (torch came before the library's first use, and the user set none
    and did not turn it off). Returns whether it spoke."""
    global _told
    if _told or device_type != "cpu":
        return False
    _told = True
    if turned_off(os.environ) or any(name in os.environ for name in VARIABLES):
        return False
    print(HINT, file=stream or sys.stderr)
    return True
