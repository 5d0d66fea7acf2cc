"""The archive's columnar steps on real SQLite and PostgreSQL trails: request ids as text
as the codec reads them, deletes in several batches (records of one time across a batch's
end among them) that note exactly what they remove, and prune in several batches."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.audit.lifecycle import archive, archive_delete, retention
from app.audit.lifecycle.archive_table import request_text
from app.audit.lifecycle.retention import DAY_US, prune
from app.audit.store.chain import chain_key
from app.audit.store.packing import pack_request_id, unpack_request_id
from app.audit.store.records import now_us
from app.audit.write.trail_db import AuditStore
from app.cli.main import main
from app.errors import Archived
from tests.support.bundles import TEST_HASH_KEY
from tests.support.services import make_record
from tests.support.trail import Trail

KEY = chain_key(TEST_HASH_KEY.encode())


def test_request_text_reads_ids_as_the_codec_does() -> None:
    ids = ["0123456789abcdef0123456789abcdef", "client-7", "sixteen-bytes-id", "é", "", "x" * 40]
    packed = pa.array([pack_request_id(r) for r in ids], pa.binary())
    assert request_text(packed).to_pylist() == ids
    assert request_text(packed.slice(1, 3)).to_pylist() == ids[1:4]
    plain = pa.array([pack_request_id(r) for r in ["a", "b"]], pa.binary())
    assert request_text(plain).to_pylist() == ["a", "b"]
    assert [unpack_request_id(p) for p in packed.to_pylist()] == ids


def _fill(trail: Trail, old: int, groups: int, size: int) -> AuditStore:
    """``groups`` links of ``size`` records, two records of each link at one time."""
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    for g in range(groups):
        rows = [f"r{g}-{k}" for k in range(size)]
        times = [old + g * 10 + k // 2 for k in range(size)]
        store.insert(
            [
                dataclasses.replace(make_record(r), created_us=t)
                for r, t in zip(rows, times, strict=True)
            ]
        )
    return store


def test_delete_in_batches_notes_exactly_what_it_removes(
    trail: Trail,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    # Batches of 3 over pairs of records of one time: every batch ends inside a pair.
    monkeypatch.setitem(archive_delete.DELETE_BATCH, "sqlite", 3)
    monkeypatch.setitem(archive_delete.DELETE_BATCH, "postgresql", 3)
    now = now_us()
    old = now - 10 * DAY_US
    store = _fill(trail, old, groups=4, size=5)
    store.insert([dataclasses.replace(make_record("new"), created_us=now)])
    out = tmp_path / "archive"
    written, ends = archive.write(store.engine, now - DAY_US, out)
    assert written.records == 20
    assert archive.check(out, KEY).intact
    table = pq.read_table(out / written.files[0]["file"])
    assert table.column("request").to_pylist()[:3] == ["r0-0", "r0-1", "r0-2"]
    assert table.column("top_expert").to_pylist()[0] in ("a", "b")
    assert archive.delete_archived(store.engine, KEY, now - DAY_US, ends) == 20
    assert trail.request_ids() == ["new"]
    noted = trail.rows("select count(*), count(distinct request_id) from iabma_audit_archived")
    assert tuple(noted[0]) == (20, 20)
    with pytest.raises(Archived, match=archive.day_of(old)):
        store.find("r3-4")
    store.close()
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out


def test_prune_in_batches_of_one_time(trail: Trail, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "BATCH", 3)
    monkeypatch.setattr(retention, "PG_BATCH", 3)
    now = now_us()
    store = _fill(trail, now - 10 * DAY_US, groups=3, size=7)
    store.insert([dataclasses.replace(make_record("new"), created_us=now)])
    done = prune(store.engine, KEY, now - DAY_US)
    assert (done.records, done.links) == (21, 3)
    assert trail.request_ids() == ["new"]
    store.close()


def test_check_names_a_record_moved_to_another_link(trail: Trail, tmp_path: Path) -> None:
    now = now_us()
    store = _fill(trail, now - 10 * DAY_US, groups=2, size=3)
    out = tmp_path / "archive"
    written, _ = archive.write(store.engine, now, out)
    store.close()
    path = out / written.files[0]["file"]
    table = pq.read_table(path)
    seq = table.column("seq").to_pylist()
    seq[0] = 2  # the first record now claims the second link
    table = table.set_column(table.schema.get_field_index("seq"), "seq", pa.array(seq))
    pq.write_table(table, path)
    said = archive.check(out, KEY).findings
    assert any(s.startswith("deleted: record 1 of 3 of chain") for s in said), said
    assert any("inserted:" in s and "'r0-0'" in s for s in said), said


def test_every_archive_file_and_directory_reaches_the_disk(
    trail: Trail, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--delete`` trusts the archive to outlive a crash: each file, and the directories
    holding them, is fsynced before write returns."""
    now = now_us()
    store = _fill(trail, now - 10 * DAY_US, groups=3, size=4)
    synced: list[Path] = []
    real = archive.os.fsync

    def fsync(fd: int) -> None:
        synced.append(Path(archive.os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(archive.os, "fsync", fsync)
    out = tmp_path / "archive"
    written, _ = archive.write(store.engine, now - DAY_US, out)
    assert written.records == 12
    files = {out / item["file"] for item in written.files}
    want = files | {out / archive.LINKS_FILE, out / archive.MANIFEST, out}
    want |= {f.parent for f in files}
    assert want <= set(synced), want - set(synced)
    # Each file when written, before the manifest that names it.
    assert max(synced.index(f) for f in files) < synced.index(out / archive.MANIFEST)
