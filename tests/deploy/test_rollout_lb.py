"""Rollout and rollback under load: real nginx, two replicas of two workers each, one trail.

``iabma promote`` and ``iabma rollback`` only move ``LATEST``; every worker of every
replica must follow it by itself, without a failed request, and every answer names the
version that served it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.deploy import REPO, Processes, Stage, writable_store
from tests.support.lb import PREDICT, start_load_balancer, upstreams_of

INTERVAL = 1.0  # IABMA_RELOAD_INTERVAL_SECONDS for this test
# Opening and verifying the demo bundle on a thread, on a busy 2-core machine.
LOAD_ALLOWANCE = 2.0
CLIENTS = 6


@dataclass(frozen=True)
class Answer:
    sent: float
    status: int
    version: str | None
    upstream: str


def iabma(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def load(url: str, stop: threading.Event, out: list[Answer]) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                r = client.post("/predict", json=PREDICT)
            except httpx.HTTPError as exc:
                out.append(Answer(sent, 0, repr(exc), ""))
                continue
            version = r.json().get("version") if r.status_code == 200 else None
            out.append(Answer(sent, r.status_code, version, ",".join(upstreams_of(r))))


def last_sent_with(answers: list[Answer], version: str, after: float, before: float) -> float:
    """When the last request answered by ``version`` and sent in [after, before) was sent."""
    times = [a.sent for a in answers if a.version == version and after <= a.sent < before]
    return max(times, default=after)


@pytest.mark.slow
def test_promote_then_rollback_under_load(
    procs: Processes,
    dockerfile: list[Stage],
    demo_store: Path,
    pg_session_url: str,
    tmp_path: Path,
) -> None:
    store, old, new = writable_store(demo_store, tmp_path / "store")
    lb = start_load_balancer(
        procs, dockerfile, store, pg_session_url,
        IABMA_WORKERS="2", IABMA_RELOAD_INTERVAL_SECONDS=str(INTERVAL),
    )  # fmt: skip
    answers: list[Answer] = []
    stop = threading.Event()
    threads = [threading.Thread(target=load, args=(lb.url, stop, answers)) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)
        assert iabma("promote", "--store", str(store), "--name", "demo", new) == (
            f"demo: {old} -> {new}"
        )
        promoted = time.monotonic()
        time.sleep(INTERVAL + LOAD_ALLOWANCE + 1.5)
        rolling_back = time.monotonic()  # the pointer moves during the command
        assert iabma("rollback", "--store", str(store), "--name", "demo") == (
            f"demo: {new} -> {old}"
        )
        rolled_back = time.monotonic()
        time.sleep(INTERVAL + LOAD_ALLOWANCE + 1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)

    statuses = Counter(a.status for a in answers)
    assert statuses == {200: len(answers)}, statuses
    assert {a.version for a in answers} == {old, new}
    assert {a.upstream for a in answers} == {r.addr for r in lb.replicas}
    # After the interval (plus the time to open a bundle), nothing answers with the old one.
    old_until = last_sent_with(answers, old, promoted, rolling_back) - promoted
    assert old_until <= INTERVAL + LOAD_ALLOWANCE, f"old version served {old_until:.2f} s on"
    new_until = last_sent_with(answers, new, rolled_back, float("inf")) - rolled_back
    assert new_until <= INTERVAL + LOAD_ALLOWANCE, f"new version served {new_until:.2f} s on"
    between = [a for a in answers if promoted + INTERVAL + LOAD_ALLOWANCE < a.sent < rolling_back]
    assert between and {a.version for a in between} == {new}
    print(
        f"\nrollout: {len(answers)} requests, 0 failed; old version last sent "
        f"{old_until:.2f} s after promote, new one {new_until:.2f} s after rollback"
    )
