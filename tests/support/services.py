"""What tests of every package share: a free port, waiting for a server, PostgreSQL, an
audit record."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest

from app.audit.store.records import AuditRecord, now_us

# The machine's PostgreSQL: trust auth on loopback, started by .ci/run when it is down.
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_ok(
    url: str, exited: Callable[[], str | None], timeout: float = 60.0
) -> httpx.Response:
    """Poll ``url`` until it answers 200; fail at once if ``exited()`` reports the server
    gone (it returns what the server said), or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        gone = exited()
        if gone is not None:
            raise AssertionError(f"the server exited before {url} answered:\n{gone}")
        try:
            r = httpx.get(url, timeout=1.0)
            if r.status_code == 200:
                return r
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.TransportError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout} s ({last})")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def open_connections(port: int) -> int:
    """Local TCP sockets connected to ``port`` on this machine that are still open
    (established, or closed by the peer but not yet by their owner)."""
    wanted = f"{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                remote_port, state = fields[2].rsplit(":", 1)[1], fields[3]
                count += remote_port == wanted and state in ("01", "08")  # ESTABLISHED, CLOSE_WAIT
    return count


ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str) -> str:
    """The tool's path; a missing tool skips the test locally and fails it on CI."""
    venv_bin = Path(sys.executable).parent
    path = shutil.which(name, path=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    if path is None:
        reason = f"{name} is not installed (`make sysdeps` installs it)"
        if ON_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def require_postgres() -> None:
    """Fail (never skip) when PostgreSQL is down: the audit trail is tested against it."""
    import psycopg

    try:
        with psycopg.connect(PG_DSN) as conn:
            conn.execute("select 1")
    except psycopg.OperationalError as exc:
        pytest.fail(
            "PostgreSQL at 127.0.0.1:5432 (user postgres, database test) is unreachable, and "
            "the audit-trail tests must run against it. Start it with: pg_ctlcluster "
            f"--skip-systemctl-redirect $(ls /etc/postgresql) main start\n{exc}"
        )


@contextlib.contextmanager
def fresh_schema(prefix: str = "iabma_test") -> Iterator[str]:
    """A trail URL whose search_path is a new, empty schema, dropped afterwards."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create schema "{schema}"')
    try:
        yield f"{PG_URL}?options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'drop schema "{schema}" cascade')


def schema_of(url: str) -> str:
    return url.rsplit("%3D", 1)[-1]


def make_record(rid: str) -> AuditRecord:
    return AuditRecord(
        request_id=rid,
        created_us=now_us(),
        model="demo",
        version="v1",
        route="predict",
        task="classification",
        experts=("a", "b"),
        classes=(0, 1),
        weights=np.array([[0.25, 0.75]]),
        prediction=np.array([[0.4, 0.6]]),
        uncertainty=np.array([[0.67, 0.6, 0.07, 0.81]]),
        latency_ms=1.0,
        input_mode="hash",
        instances=[{"x": 1}],
        hash_key=b"k" * 32,
    )
