"""Where this server's metric values live: prometheus_client's multiprocess directory,
``PROMETHEUS_MULTIPROC_DIR`` or one made per server, shared by its workers so that any
worker's scrape shows every worker's totals (docs/design.md, "Metrics")."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import re
import shutil
import tempfile
from functools import cache
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
_FILE = re.compile(r"^[a-z]+(?:_[a-z]+)?_(\d+)\.db$")


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), or ``"0"``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def server_dir(owner: int) -> Path:
    """The directory a server whose workers are children of ``owner`` uses by default."""
    return Path(tempfile.gettempdir()) / f"iabma-metrics-{owner}-{_start_ticks(owner)}"


_SERVER_DIR = re.compile(r"^iabma-metrics-(\d+)-(\d+)$")


def sweep_stale_dirs(parent: Path) -> None:
    """Remove the directories of servers that are gone.

    A single-process server removes its own at exit; the supervisor of ``--workers`` never
    imports the app, and a killed server runs no exit hook, so theirs would pile up. A
    directory is stale when its owner is dead or the pid now belongs to a newer process.
    """
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            m = _SERVER_DIR.match(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            pid = int(m.group(1))
            if not alive(pid) or _start_ticks(pid) != m.group(2):
                shutil.rmtree(entry.path, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pids_in(directory: Path) -> set[int]:
    """The pids that have written values into ``directory``."""
    out = set()
    for entry in os.listdir(directory):
        m = _FILE.match(entry)
        if m:
            out.add(int(m.group(1)))
    return out


@cache
def multiprocess_dir() -> Path:
    """Choose (once per process) and create the directory; point prometheus_client at it.

    prometheus_client decides between plain and multiprocess values when it is first
    imported, from ``PROMETHEUS_MULTIPROC_DIR``. The variable is set here, before this
    package imports it; if something imported it earlier, its value class is switched.
    """
    given = os.environ.get(ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
    else:
        parent = multiprocessing.parent_process()
        owner = parent.pid if parent is not None and parent.pid is not None else os.getpid()
        path = server_dir(owner)
        sweep_stale_dirs(path.parent)
        path.mkdir(mode=0o700, exist_ok=True)
        if owner == os.getpid():
            atexit.register(shutil.rmtree, path, True)
        os.environ[ENV] = str(path)
    from prometheus_client import values
    from prometheus_client.multiprocess import mark_process_dead

    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue()
    # Live gauges (audit queue depth, the version each worker serves) of workers that
    # died without cleaning up, e.g. killed by the OOM killer, would otherwise be summed
    # or listed for ever.
    for pid in pids_in(path):
        if not alive(pid):
            mark_process_dead(pid, str(path))
    atexit.register(_forget_this_process, path)
    return path


def _forget_this_process(path: Path) -> None:
    from prometheus_client.multiprocess import mark_process_dead

    with contextlib.suppress(OSError):
        mark_process_dead(os.getpid(), str(path))
