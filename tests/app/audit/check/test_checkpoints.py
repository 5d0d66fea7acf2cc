"""Signed checkpoints on real SQLite and PostgreSQL trails: the newest records deleted with
their links, or a whole chain, verify without them and are named with them; they need
only the public key; a checkpoint altered, or signed by another key, is named; a link
rewritten in the database is never signed; the server writes them to its file and its
log, and a last one at shutdown."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.audit.check.checkpointer import Checkpointer
from app.audit.store.engine import make_engine
from app.audit.store.records import now_us
from app.cli.main import main
from app.core.logs import JsonFormatter
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.services import wait_for
from tests.support.tampering import KEY, fill, serve_with_outcomes
from tests.support.trail import Trail


def keypair(tmp_path: Path, name: str = "sign") -> tuple[Ed25519PrivateKey, Path, Path]:
    key = Ed25519PrivateKey.generate()
    private = tmp_path / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = tmp_path / f"{name}.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return key, private, public


def sign(trail: Trail, key: Ed25519PrivateKey, path: Path, since: int) -> str | None:
    engine = make_engine(trail.url, 10.0)
    try:
        return Checkpointer(engine, KEY, key, path, since).tick()
    finally:
        engine.dispose()


def verify(trail: Trail, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit-verify", "--audit-url", trail.url, *extra])
    return code, capsys.readouterr().out


def test_the_newest_records_deleted_with_their_links_are_named(
    trail: Trail,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    key, _, public = keypair(tmp_path)
    signed = tmp_path / "checkpoints.jsonl"
    since = now_us()
    fill(trail.url, groups=30, size=5)
    assert sign(trail, key, signed, since) is not None
    with_them = ("--public-key", str(public), "--checkpoints", str(signed))
    code, out = verify(trail, capsys, *with_them)
    assert code == 0 and "1 chains held against their signed checkpoints" in out, out
    # The newest 100 records and the links that covered them: a chain that seems to stop.
    trail.execute("delete from iabma_audit_log where seq > 10")
    trail.execute("delete from iabma_audit_links where seq > 10")
    assert trail.count() == 50
    code, out = verify(trail, capsys)
    assert code == 0, "without checkpoints the deletion cannot be seen"
    code, out = verify(trail, capsys, *with_them)
    assert code == 1, out
    assert "deleted: chain 1 links 11 to 30 and their records (checkpointed at" in out, out


def test_a_whole_chain_deleted_is_named_with_the_public_key_alone(
    bundles: Bundles,
    trail: Trail,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outcomes' chains too. No HMAC key anywhere: only the checkpoints are checked, and
    that needs only the public key."""
    _, private, public = keypair(tmp_path)
    signed = tmp_path / "checkpoints.jsonl"
    serve_with_outcomes(
        bundles, trail, tmp_path, n=3, audit_signing_key_file=private,
        audit_checkpoint_file=signed,
    )  # fmt: skip
    lines = signed.read_text().splitlines()
    assert lines and json.loads(lines[-1])["final"] is True
    kinds = {h["kind"] for h in json.loads(lines[-1])["heads"]}
    assert kinds == {"records", "outcomes"}
    monkeypatch.delenv("IABMA_AUDIT_HASH_KEY", raising=False)
    (tmp_path / "audit.db.hmac-key").unlink(missing_ok=True)
    with_them = ("--public-key", str(public), "--checkpoints", str(signed))
    code, out = verify(trail, capsys, *with_them)
    assert code == 0 and "not checked themselves (no HMAC key)" in out, out
    trail.execute("delete from iabma_outcomes")
    trail.execute("delete from iabma_outcome_links")
    code, out = verify(trail, capsys, *with_them)
    assert code == 1, out
    assert "deleted: outcome chain" in out and "every link and its outcomes" in out, out


def test_a_checkpoint_altered_or_signed_by_another_key_is_named(
    trail: Trail,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    key, _, public = keypair(tmp_path)
    other, _, _ = keypair(tmp_path, "other")
    signed = tmp_path / "checkpoints.jsonl"
    since = now_us()
    fill(trail.url)
    line = sign(trail, key, signed, since)
    assert line is not None
    doc = json.loads(line)
    doc["heads"][0]["seq"] = 2  # the head moved back, to let a deletion of link 3 pass
    forged = tmp_path / "forged.jsonl"
    forged.write_text(json.dumps(doc) + "\n")
    code, out = verify(trail, capsys, "--public-key", str(public), "--checkpoints", str(forged))
    assert code == 1 and "line 1 is not a checkpoint signed by the public key" in out, out
    sign(trail, other, tmp_path / "theirs.jsonl", since)
    code, out = verify(
        trail, capsys, "--public-key", str(public), "--checkpoints", str(tmp_path / "theirs.jsonl")
    )
    assert code == 1 and "holds no checkpoint signed by the public key" in out, out
    code = main(["audit-verify", "--audit-url", trail.url, "--checkpoints", str(signed)])
    assert code == 2 and "--checkpoints needs --public-key" in capsys.readouterr().err


def test_a_link_rewritten_in_the_database_is_never_signed(
    trail: Trail, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key, _, _ = keypair(tmp_path)
    since = now_us()
    fill(trail.url)
    trail.execute(f"update iabma_audit_links set digests = {trail.blob(b'x' * 40)} where seq = 2")
    logger = logging.getLogger("iabma.audit")
    logger.addHandler(caplog.handler)
    try:
        line = sign(trail, key, tmp_path / "c.jsonl", since)
    finally:
        logger.removeHandler(caplog.handler)
    assert line is not None
    (head,) = json.loads(line)["heads"]
    assert head["seq"] == 1, "the head stays at the last link that checks out"
    assert "does not follow link 1 as written" in caplog.text


def test_the_server_signs_its_heads_to_its_file_and_its_log(
    bundles: Bundles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, private, public = keypair(tmp_path)
    signed = tmp_path / "checkpoints.jsonl"
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    settings = make_settings(
        bundles.store, tmp_path, audit_url=url, audit_hash_key=TEST_HASH_KEY,
        audit_signing_key_file=private, audit_checkpoint_file=signed,
        audit_checkpoint_seconds=0.2, log_level="WARNING",
    )  # fmt: skip
    log = tmp_path / "log.jsonl"  # the log stream, as the server formats it (JSON lines)
    handler = logging.FileHandler(log)
    handler.setFormatter(JsonFormatter())
    stream = logging.getLogger("iabma.audit.checkpoint")
    stream.addHandler(handler)
    try:
        with AsgiHarness(settings) as app:
            rows = bundles.demo.instances(slice(0, 1))
            assert app.post("/predict", json={"instances": rows}).status_code == 200
            wait_for(lambda: signed.exists() and signed.read_text().strip() != "", 10, "a line")
            first = json.loads(signed.read_text().splitlines()[0])
            assert first["final"] is False and first["heads"][0]["seq"] >= 1
            assert app.post("/predict", json={"instances": rows}).status_code == 200
    finally:
        stream.removeHandler(handler)
        handler.close()
    last = json.loads(signed.read_text().splitlines()[-1])
    assert last["final"] is True and last["heads"][0]["seq"] >= 2
    said = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert said and json.loads(said[-1]["message"]) == last, "the log carries the same"
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    for source in (signed, log):
        code = main(
            ["audit-verify", "--audit-url", url, "--public-key", str(public), "--checkpoints",
             str(source)]
        )  # fmt: skip
        out = capsys.readouterr().out
        assert code == 0 and "1 chains held against" in out, out


def test_a_signing_key_that_is_not_one_refuses_the_start(bundles: Bundles, tmp_path: Path) -> None:
    from app.audit.check.checkpointer import from_settings
    from app.errors import StartupRefused

    (tmp_path / "bad.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n")
    settings = make_settings(bundles.store, tmp_path, audit_signing_key_file=tmp_path / "bad.pem")
    with pytest.raises(StartupRefused, match="IABMA_AUDIT_SIGNING_KEY: not an unencrypted PEM"):
        from_settings(settings, 0)
    settings = make_settings(bundles.store, tmp_path, audit_checkpoint_file=tmp_path / "c")
    with pytest.raises(StartupRefused, match="IABMA_AUDIT_CHECKPOINT_FILE is set but"):
        from_settings(settings, 0)
