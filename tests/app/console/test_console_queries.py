"""The console's reads: version changes and per-version totals on a real SQLite trail, a
long timeline from the stored sums against its records (SQLite and PostgreSQL), the store's
versions, and the manifest's training ranges."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from app.audit.read import rollup
from app.audit.store.records import AuditRecord
from app.audit.write.trail_db import AuditStore, RecordFilter
from app.bundle.loader import open_bundle
from app.bundle.manifest import Manifest
from app.bundle.predictor import BundlePredictor
from app.console import queries
from app.console.versions import stored_versions
from app.core.weights import parse_time_us
from tests.support.bundles import Bundles
from tests.support.trail import HOUR, NOW, Trail, spread

KEY = b"console-test-hash-key"


def records_of(bundles: Bundles, version: str, weights: np.ndarray, start: int) -> list:
    trained = bundles.demo
    m = open_bundle(bundles.store / "demo" / trained.version).manifest
    rows = trained.instances(slice(0, len(weights)))
    return [
        AuditRecord(
            request_id=f"{version}-{i}",
            created_us=start + i,
            model="demo",
            version=version,
            route="predict",
            task="classification",
            experts=tuple(m.expert_names),
            classes=tuple(m.target.classes or ()),
            weights=weights[i : i + 1],
            prediction=np.full((1, 2), 0.5),
            uncertainty=np.zeros((1, 4)),
            latency_ms=1.0,
            input_mode="hash",
            instances=[rows[i]],
            hash_key=KEY,
        )
        for i in range(len(weights))
    ]


def test_version_changes_count_the_same_inputs_whose_top_expert_moved(
    bundles: Bundles, tmp_path: Path
) -> None:
    trained = bundles.demo
    bundle = open_bundle(bundles.store / "demo" / trained.version)
    frame = trained.X.iloc[:30]
    cols = {
        f.input: frame[f.name].to_numpy(np.float32).reshape(-1, 1) for f in bundle.manifest.features
    }
    w1 = BundlePredictor(bundle).predict(cols, interval=False).weights.astype(np.float64)
    w2 = w1.copy()
    w2[::3] = w2[::3, ::-1]  # every third input: the experts' weights reversed
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}", 10)
    store.prepare()
    store.insert(records_of(bundles, "v1", w1, 1_000))
    store.insert(records_of(bundles, "v2", w2, 2_000))
    flt = RecordFilter(model="demo")
    changes = queries.version_changes(store, flt)
    moved = int((w1.argmax(axis=1) != w2.argmax(axis=1)).sum())
    assert moved > 0
    assert changes == [
        {"from": "v1", "to": "v2", "inputs": 30, "changed": moved, "share": moved / 30}
    ]
    data = queries.timeline(store, flt)
    assert set(data["versions"]) == {"v1", "v2"}
    experts = bundle.manifest.expert_names
    for version, w in (("v1", w1), ("v2", w2)):
        got = data["versions"][version]["experts"]
        share = np.bincount(w.argmax(axis=1), minlength=len(experts)) / len(w)
        assert [got[e]["argmax_share"] for e in experts] == pytest.approx(share.tolist())
        assert [got[e]["mean_weight"] for e in experts] == pytest.approx(w.mean(axis=0).tolist())
    assert queries.version_changes(store, RecordFilter(model="demo", version="v2")) == []
    store.close()


def bucket_from_records(store: AuditStore, flt: RecordFilter, bucket: dict) -> dict:
    """A timeline bucket as its records alone make it, read as ``GET /weights`` once did."""
    since, until = (parse_time_us(k, bucket[k]) for k in ("start", "end"))
    sums = rollup.Sums()
    store._add_records(dataclasses.replace(flt, since_us=since, until_us=until), sums)
    return sums.json()


def test_a_long_timeline_reads_the_stored_sums_and_matches_its_records(trail: Trail) -> None:
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    store.insert(spread(np.random.default_rng(7), 900, hours=30))
    cases = [
        (None, None, None, None),
        (NOW - 20 * HOUR + 12_345, NOW - HOUR - 678, None, None),  # off the ten minutes
        (NOW - 26 * HOUR, None, "b", None),
        (None, NOW - 5 * HOUR, None, "v2"),
    ]
    for since, until, expert, version in cases:
        flt = RecordFilter("demo", since, until, expert, version)
        data = queries.timeline(store, flt, now=NOW)
        assert 12 <= len(data["buckets"]) <= queries.MAX_BUCKETS
        inner = [parse_time_us("start", b["start"]) for b in data["buckets"][1:]]
        assert all(t % rollup.BUCKET_US == 0 for t in inner), "inner edges on the ten minutes"
        assert sum(b["records"] for b in data["buckets"]) == data["overall"]["records"] > 0
        for bucket in data["buckets"]:
            want = bucket_from_records(store, flt, bucket)
            assert (bucket["records"], bucket["instances"]) == (want["records"], want["instances"])
            for name, got in bucket["experts"].items():
                if got is None:
                    assert name not in want["experts"]
                else:
                    assert got == pytest.approx(want["experts"][name], abs=1e-12), name
    summed = trail.rows("select sum(records) from iabma_audit_buckets")[0][0]
    assert summed > 500, "the sealed records were summed, and read from there"
    # The stored sums are what is read: changed, they change the timeline.
    trail.execute("update iabma_audit_buckets set records = records + 1000")
    changed = queries.timeline(store, RecordFilter("demo"), now=NOW)["overall"]["records"]
    rows = trail.rows("select count(*) from iabma_audit_buckets")[0][0]
    assert changed == 900 + 1000 * rows
    store.close()


def test_a_short_timeline_splits_its_own_records(tmp_path: Path) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}", 10)
    store.prepare()
    store.insert(spread(np.random.default_rng(8), 30, hours=2))
    data = queries.timeline(store, RecordFilter("demo"), now=NOW)
    assert len(data["buckets"]) == queries.MAX_BUCKETS
    assert sum(b["records"] for b in data["buckets"]) == 30
    assert store.engine.dialect.name == "sqlite"
    with sqlite3.connect(tmp_path / "audit.db") as conn:
        assert conn.execute("select count(*) from iabma_audit_rollup").fetchone() == (0,)
    store.close()


def test_stored_versions_mark_latest_and_the_served_one(store_copy: Path) -> None:
    root = store_copy / "demo"
    served = (root / "LATEST").read_text().strip()
    newer = root / "29990101T000000Z"
    shutil.copytree(root / served, newer)
    manifest = json.loads((newer / "manifest.json").read_text())
    manifest["created_at"] = "2999-01-01T00:00:00+00:00"
    (newer / "manifest.json").write_text(json.dumps(manifest))
    (root / "LATEST").write_text(newer.name)
    (root / "not-a-version").mkdir()
    found = stored_versions(store_copy, "demo", served)
    assert [v.name for v in found] == [newer.name, served]
    assert found[0].latest and not found[0].serving
    assert found[1].serving and not found[1].latest
    assert stored_versions(store_copy, "absent", served) == []


def test_the_manifest_records_numeric_training_ranges(bundles: Bundles) -> None:
    from training.datasets import simulate

    m = open_bundle(bundles.store / "demo" / bundles.demo.version).manifest
    train = simulate(1000, 0).X
    for f in m.features:
        assert (f.low, f.high) == pytest.approx((train[f.name].min(), train[f.name].max()))
    credit = open_bundle(bundles.store / "credit" / bundles.credit.version).manifest
    assert all((f.low is None) == (f.dtype == "string") for f in credit.features)
    old = m.model_dump(mode="json")
    for f in old["features"]:
        del f["low"], f["high"]
    assert Manifest.model_validate(old).features[0].low is None, "older bundles still load"
    bad = m.model_dump(mode="json")
    bad["features"][0]["low"], bad["features"][0]["high"] = 2.0, 1.0
    with pytest.raises(ValidationError, match="low must not exceed high"):
        Manifest.model_validate(bad)


@pytest.mark.parametrize("hours", [2, 30], ids=["records", "stored sums"])
def test_a_record_committed_while_the_timeline_reads_stays_out_of_it(
    trail: Trail, monkeypatch: pytest.MonkeyPatch, hours: int
) -> None:
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    store.insert(spread(np.random.default_rng(9), 200, hours=hours))
    late = dataclasses.replace(spread(np.random.default_rng(10), 1, hours=0.01)[0],
                               request_id="late", created_us=NOW + 60_000_000)  # fmt: skip
    span = queries._span

    def span_then_commit(store_: AuditStore, flt: RecordFilter) -> tuple[int, int] | None:
        found = span(store_, flt)
        store.insert([late])  # as the writer would, between the timeline's reads
        return found

    monkeypatch.setattr(queries, "_span", span_then_commit)
    data = queries.timeline(store, RecordFilter("demo"), now=NOW + 120_000_000)
    assert data["overall"]["records"] == 200
    for bucket in data["buckets"]:
        want = bucket_from_records(store, RecordFilter("demo"), bucket)
        assert bucket["records"] == want["records"]
    store.close()


def test_short_buckets_end_at_until(tmp_path: Path) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}", 10)
    store.prepare()
    store.insert(spread(np.random.default_rng(11), 50, hours=1))
    until = NOW - 600_000_001
    flt = RecordFilter("demo", NOW - 2 * HOUR + 7, until)
    data = queries.timeline(store, flt, now=NOW)
    assert parse_time_us("end", data["buckets"][-1]["end"]) == until
    for bucket in data["buckets"]:
        assert bucket["records"] == bucket_from_records(store, flt, bucket)["records"]
    store.close()
