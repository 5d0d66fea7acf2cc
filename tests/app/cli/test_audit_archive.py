"""``iabma audit-archive`` on real SQLite and PostgreSQL trails: Parquet files per day and
version that pandas reads as they are, checked before ``--delete``; the live chain still
verifies; an archived request id is a 410 naming its day; an edited file is caught;
outcomes leave with their records."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from app.audit.lifecycle.archive import day_of
from app.audit.lifecycle.retention import DAY_US, prune
from app.audit.read.labelled import labelled_rows
from app.audit.store.chain import chain_key
from app.audit.store.engine import make_engine
from app.audit.store.records import iso_from_us, now_us
from app.audit.write.trail_db import AuditStore
from app.cli.main import main
from app.errors import Archived
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness
from tests.support.services import make_record
from tests.support.tampering import serve_with_outcomes
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


def test_outcomes_leave_with_their_records(
    bundles: Bundles,
    trail: Trail,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each record's outcomes go to the archive with it: the trail keeps none that has no
    record (refit's reader crashed on those with a KeyError), the chains still verify, and
    an outcome posted for an archived request is a 410."""
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    serve_with_outcomes(bundles, trail, tmp_path, n=3)
    out = tmp_path / "archive"
    after = iso_from_us(now_us() + 60_000_000)
    code = main(["audit-archive", "--audit-url", trail.url, "--before", after, "--out",
                 str(out), "--delete"])  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0 and "and their 6 outcomes" in said, said
    kept = pd.read_parquet(out / "outcomes.parquet")
    assert sorted(kept["request_id"].tolist()) == ["p0", "p0", "p1", "p1", "p2", "p2"]
    assert json.loads((out / "manifest.json").read_text())["outcomes"]["rows"] == 6
    assert trail.rows("select count(*) from iabma_outcomes")[0][0] == 0
    assert trail.rows("select count(*) from iabma_outcome_links")[0][0] == 0
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out
    assert main(["audit-archive", "--verify", str(out)]) == 0, capsys.readouterr().out
    engine = make_engine(trail.url, 10.0)
    try:
        assert labelled_rows(engine, "demo") == ([], {})
    finally:
        engine.dispose()
    settings = make_settings(
        bundles.store, tmp_path, audit_url=trail.url, audit_hash_key=TEST_HASH_KEY
    )
    with AsgiHarness(settings) as app:
        r = app.post("/feedback", json={"outcomes": [{"request_id": "p1", "outcome": 1}]})
        assert r.status_code == 410, r.text
        assert r.json()["error"]["field"] == "outcomes[0].request_id"


def test_outcomes_an_older_archive_left_behind_are_read_past(
    bundles: Bundles, trail: Trail, tmp_path: Path
) -> None:
    """A record deleted by an archive of an earlier release, its outcomes left: refit's
    reader leaves them out, and retention removes them."""
    serve_with_outcomes(bundles, trail, tmp_path, n=2)
    trail.execute(f"delete from iabma_audit_log where request_id = {trail.rid('p0')}")
    engine = make_engine(trail.url, 10.0)
    try:
        rows, inputs = labelled_rows(engine, "demo")
        assert [r.request_id for r in rows] == ["p1", "p1"] and len(inputs) == 1
        done = prune(engine, chain_key(TEST_HASH_KEY.encode()), now_us() + 60_000_000)
        assert done.outcomes == 4  # the two left behind, and those of p1 with its record
    finally:
        engine.dispose()
