"""A trail on a 3 MiB tmpfs that fills up under load: every acknowledged prediction keeps
its record, ``/readyz`` turns 503 naming the disk within IABMA_AUDIT_UNREADY_SECONDS while
``/livez`` stays 200, and freed space brings 200s back without a restart."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.audit.store.packing import unpack_request_id
from app.audit.write.health import cause
from app.audit.write.trail_db import AuditStore
from tests.support.bundles import Bundles
from tests.support.harness import UvicornProcess
from tests.support.services import free_port, wait_for

UNREADY_S = 1.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs made for this test (root only: the CI container runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    """Take every free byte of the file system with one file."""
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as fh:
        while True:
            try:
                fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        while True:  # the last partial chunk
            try:
                fh.write(b"\0" * 512)
            except OSError:
                break


class Load:
    """Threads posting single-row predictions with their own request ids until stopped."""

    def __init__(self, url: str, body: dict[str, object], threads: int = 4) -> None:
        self.url, self.body = url, body
        self.ok: list[str] = []
        self.refused: list[httpx.Response] = []
        self.other: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,)) for k in range(threads)]

    def _run(self, k: int) -> None:
        with httpx.Client(timeout=30) as client:
            n = 0
            while not self._stop.is_set():
                rid = f"load-{k}-{n}"
                n += 1
                r = client.post(self.url, json=self.body, headers={"X-Request-ID": rid})
                if r.status_code == 200:
                    self.ok.append(rid)
                elif r.status_code == 503:
                    self.refused.append(r)
                else:
                    self.other.append(f"{r.status_code} {r.text[:200]}")

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


def test_a_full_disk_turns_readiness_off_and_freed_space_brings_it_back(
    bundles: Bundles, small_disk: Path
) -> None:
    trail = small_disk / "audit.db"
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{trail}",
        "IABMA_AUDIT_UNREADY_SECONDS": str(UNREADY_S),
        "IABMA_AUDIT_TIMEOUT_SECONDS": "3",
        "IABMA_LOG_LEVEL": "WARNING",
    }
    body = {"instances": bundles.demo.instances([0])}
    with UvicornProcess(env) as server:
        server.wait_ready()
        url = server.base_url
        filler = small_disk / "filler"
        with Load(url + "/predict", body) as load:
            wait_for(lambda: len(load.ok) >= 50, 60, "predictions on the empty disk")
            fill(filler)
            wait_for(lambda: bool(load.refused), 60, "a 503 once the disk is full")
            first_refused = time.monotonic()
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 503, 30, "/readyz 503")
            unready_after = time.monotonic() - first_refused
        assert not load.other, load.other[:3]
        # The commit that first failed may have begun before the first 503 was seen; the
        # probe runs every half second.
        assert unready_after <= UNREADY_S + 1.5, unready_after
        ready = httpx.get(url + "/readyz")
        assert ready.json()["status"] == "audit_unavailable"
        assert "disk is full" in ready.json()["reason"], ready.json()
        assert httpx.get(url + "/livez").status_code == 200
        assert httpx.get(url + "/v2/health/ready").status_code == 503
        refusal = load.refused[-1].json()["error"]["message"]
        assert "disk is full" in refusal, refusal

        # Nothing comes while unready: the probe, not traffic, finds the space again.
        os.unlink(filler)
        wait_for(lambda: httpx.get(url + "/readyz").status_code == 200, 30, "/readyz 200 again")
        after = httpx.post(url + "/predict", json=body, headers={"X-Request-ID": "after"})
        assert after.status_code == 200, after.text
        acknowledged = [*load.ok, "after"]
        with sqlite3.connect(f"file:{trail}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT request_id FROM iabma_audit_log").fetchall()
        stored = [unpack_request_id(row[0]) for row in rows]
        code, _, err = server.terminate()
    assert code == 0 or code < 0, err
    # Exact: every acknowledged prediction has its record, and no refused one has.
    assert sorted(stored) == sorted(acknowledged)
    assert len(load.refused) > 0


def test_the_cause_names_what_the_database_said() -> None:
    """A server that is not there: the 503's cause is the driver's "Connection refused",
    not SQLAlchemy's class name."""
    store = AuditStore(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test", 2.0)
    try:
        with pytest.raises(Exception) as caught:
            store.probe()
    finally:
        store.close()
    said = cause(caught.value)
    assert "Connection refused" in said and said.startswith("OperationalError: "), said
