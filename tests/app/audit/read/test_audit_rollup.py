"""Aggregates from stored bucket sums equal aggregates summed from every record, on SQLite
and PostgreSQL, for any window and filter, as the sums are made, extended and dropped."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from app.audit.read import rollup
from app.audit.write.trail_db import AuditStore, RecordFilter
from tests.support.trail import HOUR, NOW, Trail, spread


def fill(store: AuditStore, seed: int, n: int, hours: float) -> np.random.Generator:
    """Store ``n`` records of demo over the ``hours`` before NOW; the generator goes on."""
    rng = np.random.default_rng(seed)
    store.insert(spread(rng, n, hours))
    return rng


def from_records(store: AuditStore, flt: RecordFilter) -> dict[str, Any]:
    """The aggregate summed from every matching record, as before the bucket sums."""
    sums = rollup.Sums()
    store._add_records(flt, sums)
    return sums.json()


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert (got["records"], got["instances"]) == (want["records"], want["instances"])
    assert got["experts"].keys() == want["experts"].keys()
    for name, value in want["experts"].items():
        # Sums of float32 weights (app.audit.store.packing) added in another order: to 1e-9.
        assert got["experts"][name] == pytest.approx(value, abs=1e-9), name


def each_sealed_record_once(trail: Trail, cut: int) -> int:
    """Assert that the bucket rows count each of demo's records before ``cut`` once."""
    sealed = trail.rows(
        "select count(*) from iabma_audit_log join iabma_audit_versions v "
        f"on v.id = version_id where v.model = 'demo' and created_us < {cut}"
    )[0][0]
    assert trail.rows("select sum(records) from iabma_audit_buckets")[0][0] == sealed
    return int(sealed)


@pytest.fixture
def store(trail: Trail) -> Any:
    s = AuditStore(trail.url, 10.0)
    s.prepare()
    yield s
    s.close()


def test_any_window_and_filter_matches_the_records(store: AuditStore, trail: Trail) -> None:
    rng = fill(store, 0, 600, 30)
    store.insert(spread(rng, 50, hours=30, model="other"))
    windows: list[tuple[int | None, int | None]] = [
        (None, None),
        (NOW - 7 * HOUR - 1234, None),
        (None, NOW - 3 * HOUR + 17),
        (NOW - 20 * HOUR + 5, NOW - 2 * HOUR - 99),
        (NOW - 10 * HOUR, NOW - 9 * HOUR),  # on bucket edges
        (NOW - 60_000_000, None),  # only the newest minute: nothing sealed
    ]
    for since, until in windows:
        for expert in (None, "b"):
            for version in (None, "v2"):
                flt = RecordFilter("demo", since, until, expert, version)
                assert_same(store.aggregate(flt, now=NOW), from_records(store, flt))
    summed = trail.rows("select model, through_us from iabma_audit_rollup")
    assert summed == [("demo", rollup.floor_bucket(NOW - rollup.SEAL_US))]
    assert each_sealed_record_once(trail, summed[0][1]) > 0


def test_later_aggregates_sum_only_the_newly_sealed_buckets(
    store: AuditStore, trail: Trail
) -> None:
    rng = fill(store, 1, 300, 10)
    flt = RecordFilter("demo")
    assert_same(store.aggregate(flt, now=NOW), from_records(store, flt))
    rows_before = trail.rows("select count(*) from iabma_audit_buckets")[0][0]
    # An hour later, with records of that hour: the hour's buckets are summed on top.
    later = [dataclasses.replace(r, created_us=r.created_us + HOUR) for r in spread(rng, 80, 1)]
    store.insert(later)
    assert_same(store.aggregate(flt, now=NOW + HOUR), from_records(store, flt))
    through = trail.rows("select through_us from iabma_audit_rollup")[0][0]
    assert through == rollup.floor_bucket(NOW + HOUR - rollup.SEAL_US)
    assert trail.rows("select count(*) from iabma_audit_buckets")[0][0] > rows_before


def test_sums_read_instead_of_records_and_rebuilt_once_dropped(
    store: AuditStore, trail: Trail
) -> None:
    fill(store, 2, 200, 5)
    flt = RecordFilter("demo")
    first = store.aggregate(flt, now=NOW)
    # The stored sums are what is read: changed, they change the answer.
    trail.execute("update iabma_audit_buckets set records = records + 1000")
    assert (
        store.aggregate(flt, now=NOW)["records"]
        == first["records"] + 1000 * trail.rows("select count(*) from iabma_audit_buckets")[0][0]
    )
    # Dropped (the model's watermark deleted), they are rebuilt from the records: the
    # changed rows are replaced, not added to.
    trail.execute("delete from iabma_audit_rollup where model = 'demo'")
    assert_same(store.aggregate(flt, now=NOW), first)
    assert each_sealed_record_once(trail, rollup.floor_bucket(NOW - rollup.SEAL_US)) > 0


def test_readers_racing_to_sum_count_each_record_once(store: AuditStore, trail: Trail) -> None:
    fill(store, 3, 400, 5)
    cut = rollup.floor_bucket(NOW - rollup.SEAL_US)
    # Each with its own engine, as readers in several workers would be.
    readers = [AuditStore(trail.url, 10.0) for _ in range(4)]
    with ThreadPoolExecutor(len(readers)) as pool:
        done = list(pool.map(lambda s: rollup.sum_sealed(s.engine, "demo", cut), readers))
    for reader in readers:
        reader.close()
    assert done == [cut] * len(readers)
    assert each_sealed_record_once(trail, cut) > 300


def test_an_empty_trail(store: AuditStore) -> None:
    assert store.aggregate(RecordFilter("demo"), now=NOW) == {
        "records": 0,
        "instances": 0,
        "experts": {},
    }
