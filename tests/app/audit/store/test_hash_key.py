"""The hash audit mode is a keyed HMAC: where the key comes from, and when the server refuses."""

from __future__ import annotations

import hashlib
import hmac
import json
import multiprocessing
import stat
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from app.audit.store.hashkey import KEY_SUFFIX, local_key
from app.settings import Settings
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornProcess

ROW = {"x1": 0.25, "x2": -1.5}


def digest_of(app: AsgiHarness, rid: str) -> str:
    r = app.post("/predict", json={"instances": [ROW]}, headers={"X-Request-ID": rid})
    assert r.status_code == 200, r.text
    return app.get("/weights", params={"request_id": rid}).json()["input"]["hmac_sha256"]


def canonical() -> bytes:
    return json.dumps([ROW], sort_keys=True, separators=(",", ":")).encode()


def test_a_sqlite_trail_makes_its_key_once_and_keeps_it(bundles: Bundles, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path)
    key_file = tmp_path / ("audit.db" + KEY_SUFFIX)
    with AsgiHarness(settings) as app:
        first = digest_of(app, "k-1")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip().encode()
    assert len(key) == 64
    assert first == hmac.new(key, canonical(), hashlib.sha256).hexdigest()
    assert first != hashlib.sha256(canonical()).hexdigest()  # not the bare, guessable hash
    with AsgiHarness(settings) as app:  # a restart reads the same key
        assert digest_of(app, "k-2") == first
    assert key_file.read_text().strip().encode() == key


def test_a_given_key_is_used_and_no_file_is_made(bundles: Bundles, tmp_path: Path) -> None:
    key = "a-key-from-a-secret-store-0123456789"
    with AsgiHarness(make_settings(bundles.store, tmp_path, audit_hash_key=key)) as app:
        got = digest_of(app, "k-3")
    assert got == hmac.new(key.encode(), canonical(), hashlib.sha256).hexdigest()
    assert not list(tmp_path.glob("*" + KEY_SUFFIX))


def test_key_file_setting(bundles: Bundles, tmp_path: Path) -> None:
    secret = tmp_path / "hash-key"
    secret.write_text("from-a-mounted-secret-0123456789\n")
    settings = make_settings(bundles.store, tmp_path, audit_hash_key_file=secret)
    with AsgiHarness(settings) as app:
        got = digest_of(app, "k-4")
    want = hmac.new(b"from-a-mounted-secret-0123456789", canonical(), hashlib.sha256)
    assert got == want.hexdigest()


def test_payload_off_still_keys_the_chain(bundles: Bundles, tmp_path: Path) -> None:
    """No input is hashed, but the tamper-evident chain (app.audit.store.chain) needs the key."""
    with AsgiHarness(make_settings(bundles.store, tmp_path, audit_payload="off")) as app:
        assert app.post("/predict", json={"instances": [ROW]}).status_code == 200
    assert len(list(tmp_path.glob("*" + KEY_SUFFIX))) == 1


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "IABMA_AUDIT_HASH_KEY is not set: every replica writing to one PostgreSQL trail"),
        ({"IABMA_AUDIT_HASH_KEY": "short"}, "IABMA_AUDIT_HASH_KEY is 5 characters"),
    ],
)
def test_postgresql_without_a_usable_key_refuses_to_start(
    bundles: Bundles, pg_url: str, tmp_path: Path, env: dict[str, str], says: str
) -> None:
    base = {"IABMA_STORE": str(bundles.store), "IABMA_AUDIT_URL": pg_url}
    with UvicornProcess({**base, **env}, cwd=tmp_path) as server:
        code = server.proc.wait(60)
        _, err = server.output()
    assert code != 0
    assert says in err
    assert "Traceback" not in err


def test_the_key_is_never_shown(tmp_path: Path) -> None:
    s = Settings(audit_hash_key="do-not-print-me-0123456789")
    assert "do-not-print-me" not in repr(s) and "do-not-print-me" not in str(s.model_dump())


def test_processes_starting_together_get_one_whole_key(tmp_path: Path) -> None:
    # Workers of one server start at once; none may read the file before its key is in it.
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        for round_ in range(10):
            path = tmp_path / f"audit-{round_}.db{KEY_SUFFIX}"
            keys = list(pool.map(_key_after, [path] * 4, [time.time() + 0.2] * 4))
            assert len(set(keys)) == 1 and len(keys[0]) == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"audit-{r}.db{KEY_SUFFIX}" for r in range(10)
    )  # no temporary file left behind


def _key_after(path: Path, start: float) -> bytes:
    time.sleep(max(0.0, start - time.time()))
    return local_key(path)
