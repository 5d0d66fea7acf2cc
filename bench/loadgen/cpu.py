"""Who used the CPU during a run: the server, wrk, and everything else on the machine.

The machine has two cores that the server and wrk already share; any other busy process
(a test suite, a training job) takes throughput away from the server and makes the figure
wrong without a trace. Each run records the share of the machine that went elsewhere so
such a figure can be spotted and rerun.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1


def _machine_busy_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / TICK


def _procs_s(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        f = stat.rsplit(")", 1)[1].split()
        total += int(f[11]) + int(f[12])  # utime, stime
    return total / TICK


def named_s(comm: str) -> float:
    """CPU seconds used so far by every live process named ``comm`` (e.g. ``postgres``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == comm:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return _procs_s(pids)


def _children_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _self_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class CpuWatch:
    """Call :meth:`start` before a run and :meth:`stop` after; shares are of all cores."""

    pids: Sequence[int]
    _t: float = 0.0
    _busy: float = 0.0
    _server: float = 0.0
    _wrk: float = 0.0
    _self: float = 0.0

    def start(self) -> None:
        self._t, self._busy = time.monotonic(), _machine_busy_s()
        self._server, self._wrk, self._self = _procs_s(self.pids), _children_s(), _self_s()

    def stop(self) -> dict[str, float]:
        capacity = (time.monotonic() - self._t) * CPUS
        busy = _machine_busy_s() - self._busy
        server = _procs_s(self.pids) - self._server
        wrk = _children_s() - self._wrk  # wrk is a waited-for child of this process
        own = _self_s() - self._self
        other = max(0.0, busy - server - wrk - own)

        def pct(x: float) -> float:
            return round(100 * x / capacity, 1) if capacity > 0 else 0.0

        return {"server_pct": pct(server), "wrk_pct": pct(wrk), "other_pct": pct(other)}


def other_pct(pids: Sequence[int], window_s: float = 1.0) -> float:
    """Share of the machine (all cores) used outside ``pids`` and this process, now."""
    watch = CpuWatch(pids)
    watch.start()
    time.sleep(window_s)
    return watch.stop()["other_pct"]


def wait_quiet(pids: Sequence[int], threshold_pct: float, max_wait_s: float) -> dict[str, float]:
    """Wait (at most ``max_wait_s``) until other processes use under ``threshold_pct``.

    Returns the seconds waited and the last share seen; the run goes ahead either way, and
    its own ``other_pct`` tells whether the wait worked.
    """
    t0 = time.monotonic()
    seen = 0.0
    while max_wait_s > 0:
        seen = other_pct(pids)
        if seen < threshold_pct or time.monotonic() - t0 >= max_wait_s:
            break
    return {"waited_s": round(time.monotonic() - t0, 1), "other_pct_before": seen}
