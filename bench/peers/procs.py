"""Server subprocesses that are always reaped: own process group, atexit, SIGTERM, Ctrl-C.

Each server starts in a new session, so killing its process group also ends the workers a
supervisor forked (uvicorn ``--workers``, MLServer's parallel workers), and a Ctrl-C at the
terminal reaches only the benchmark, whose ``finally`` blocks then stop every server.
"""

from __future__ import annotations

import atexit
import http.client
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

_LIVE: set[subprocess.Popen[bytes]] = set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_between(low: int, high: int) -> int:
    """A free port in ``[low, high]`` on 127.0.0.1, for a machine that hands out ranges."""
    for port in range(low, high + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free port between {low} and {high}")


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace`` seconds."""
    _LIVE.discard(proc)
    pgid = proc.pid  # start_new_session=True made the server its group's leader
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and group_members(pgid):
            proc.poll()
            time.sleep(0.05)
        if not group_members(pgid):
            break
    # Reap the leader: a zombie left behind outlives this process (PID 1 here does not reap).
    with suppress(subprocess.TimeoutExpired):
        proc.wait(5.0)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; the fields follow the last ")".
    return stat.rsplit(")", 1)[1].split()


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    out = []
    for pid in _pids():
        fields = _stat_fields(pid)  # [state, ppid, pgrp, ...]
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(pid)
    return out


def stop_all() -> None:
    for proc in list(_LIVE):
        stop(proc, grace=5.0)


def _sigterm(_signum: int, _frame: object) -> None:
    # Turn SIGTERM into SystemExit so that every finally block (and atexit) runs.
    raise SystemExit(143)


def install_cleanup() -> None:
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, _sigterm)


def get_status(port: int, path: str, timeout: float = 1.0) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


@contextmanager
def server(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    log: Path,
    port: int,
    health: str,
    ready_timeout: float = 120.0,
) -> Iterator[tuple[subprocess.Popen[bytes], float]]:
    """Start ``argv``; yield (process, seconds from spawn to the first 200 on ``health``)."""
    with log.open("wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _LIVE.add(proc)
    try:
        deadline = t0 + ready_timeout
        while get_status(port, health, timeout=2.0) != 200:
            if proc.poll() is not None or time.perf_counter() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                why = f"exited {proc.returncode}" if proc.poll() is not None else "timed out"
                raise RuntimeError(f"{argv[0]} {why} before {health} answered 200:\n{tail}")
            time.sleep(0.02)
        yield proc, time.perf_counter() - t0
    finally:
        stop(proc)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields:
            tree.setdefault(int(fields[1]), []).append(pid)
    return tree


def descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def worker_pids(pid: int) -> list[int]:
    """The processes that serve requests: uvicorn's spawned workers, else ``pid`` itself.

    With ``--workers N`` (N > 1) uvicorn's supervisor spawns N children through
    multiprocessing (``spawn_main``); multiprocessing's resource tracker is not a worker.
    """
    spawned = [p for p in descendants(pid) if "spawn_main" in cmdline(p)]
    return spawned or [pid]
