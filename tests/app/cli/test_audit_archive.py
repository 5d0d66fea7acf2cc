"""``iabma audit-archive`` on real SQLite and PostgreSQL trails: Parquet files per day and
version that pandas reads as they are, checked before ``--delete``; the live chain still
verifies; an archived request id is a 410 naming its day; an edited file is caught."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from app.audit.archive import day_of
from app.audit.chain import chain_key
from app.audit.records import iso_from_us, now_us
from app.audit.retention import DAY_US
from app.audit.store import AuditStore
from app.cli.main import main
from app.errors import Archived
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import UvicornHarness
from tests.support.services import make_record
from tests.support.trail import Trail


def test_archive_delete_and_verify(
    trail: Trail,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    now = now_us()
    old = now - 10 * DAY_US
    store = AuditStore(trail.url, 10.0, chain_key(TEST_HASH_KEY.encode()))
    store.prepare()
    groups = [
        [("a1", old, "v1"), ("a2", old + 1, "v2")],
        [("b1", old + DAY_US, "v1")],
        [("new", now, "v1")],
    ]
    for group in groups:
        store.insert(
            [dataclasses.replace(make_record(r), created_us=t, version=v) for r, t, v in group]
        )
    out = tmp_path / "archive"
    before = iso_from_us(now - 5 * DAY_US)
    code = main(["audit-archive", "--audit-url", trail.url, "--before", before, "--out", str(out),
                 "--delete"])  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0, said
    assert "wrote 3 records in 3 files" in said and "deleted 3 archived records" in said
    days = [day_of(old), day_of(old + DAY_US)]
    files = sorted(str(p.relative_to(out)) for p in out.glob("*/*.parquet"))
    assert files == [f"{days[0]}/v1.parquet", f"{days[0]}/v2.parquet", f"{days[1]}/v1.parquet"]
    frame = pd.read_parquet(out / days[0] / "v1.parquet")
    assert frame["request"].tolist() == ["a1"] and frame["model"].tolist() == ["demo"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == 3 and len(manifest["files"]) == 3

    assert trail.request_ids() == ["new"]
    with pytest.raises(Archived, match=f"archived in the Parquet files of {days[1]}"):
        store.find("b1")
    store.close()
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out
    assert main(["audit-archive", "--verify", str(out)]) == 0, capsys.readouterr().out
    capsys.readouterr()

    # Someone edits an archived record (and even fixes the checksum in the manifest).
    path = out / days[1] / "v1.parquet"
    table = pq.read_table(path).to_pandas()
    table.loc[0, "latency_us"] = 99
    table.to_parquet(path)
    item = next(f for f in manifest["files"] if f["file"] == f"{days[1]}/v1.parquet")
    import hashlib

    item["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["audit-archive", "--verify", str(out)]) == 1
    said = capsys.readouterr().out
    assert "edited:" in said and "'b1'" in said, said


def test_an_archived_request_id_is_a_410_over_http(
    bundles: Bundles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Archived while the server runs (SQLite's key file beside the trail is the key)."""
    settings = make_settings(bundles.store, tmp_path)
    with UvicornHarness(settings) as app:
        row = bundles.demo.instances([0])
        r = app.post("/predict", json={"instances": row}, headers={"X-Request-ID": "gone-1"})
        assert r.status_code == 200
        after = iso_from_us(now_us() + 1_000_000)
        out = tmp_path / "archive"
        code = main(["audit-archive", "--audit-url", settings.audit_url, "--before", after,
                     "--out", str(out), "--delete"])  # fmt: skip
        assert code == 0, capsys.readouterr().out
        back = app.get("/weights", params={"request_id": "gone-1"})
        assert back.status_code == 410, back.text
        assert back.json()["error"]["code"] == "archived"
        assert day_of(now_us()) in back.json()["error"]["message"]
        assert app.get("/weights", params={"request_id": "never"}).status_code == 404
