"""Outcomes an attacker cannot use, on real SQLite and PostgreSQL trails: a regression
outcome outside the model's range is refused naming the range, and rows an older release
stored (1e300) never break /performance; each outcome keeps who posted it, and a poster
can be left out of /performance and of what refit reads; an id that names two records
takes no outcome; an archived one answers 410; two posts sharing rows in opposite orders
never fail into a 5xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.audit.read.labelled import labelled_rows
from app.audit.store.engine import make_engine
from app.core.feedback import poster_of
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.tampering import KEY
from tests.support.trail import Trail

FEEDER, OTHER = "feeder-key-0123456789", "other-feeder-key-98765"


@pytest.fixture
def credit(bundles: Bundles, trail: Trail, tmp_path: Path) -> Iterator[AsgiHarness]:
    """The regression bundle, with two feedback keys and an auditor key."""
    settings = make_settings(
        bundles.store, tmp_path, "credit", audit_url=trail.url, audit_hash_key=TEST_HASH_KEY,
        feedback_keys=f"{FEEDER},{OTHER}", auditor_keys="auditor-key-0123456789",
        api_keys="data-key-0123456789",
    )  # fmt: skip
    with AsgiHarness(settings) as app:
        yield app


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


AUDITOR = bearer("auditor-key-0123456789")


def predict(app: AsgiHarness, bundles: Bundles, rid: str, rows: slice) -> list[Any]:
    r = app.post(
        "/predict",
        json={"instances": bundles.credit.instances(rows)},
        headers={"X-Request-ID": rid, **bearer("data-key-0123456789")},
    )
    assert r.status_code == 200, r.text
    return list(r.json()["predictions"])


def target_range(app: AsgiHarness) -> tuple[float, float]:
    t = app.service.runtime.require().manifest.target
    assert t.mean is not None and t.scale is not None and t.low is not None
    assert t.high is not None
    lo, hi = t.mean + t.scale * t.low, t.mean + t.scale * t.high
    return lo - 10 * (hi - lo), hi + 10 * (hi - lo)


@pytest.mark.parametrize("outcome", [1e300, -1.7e308, 1e100, "1e300", 10**30, -(10**30)])
def test_an_outcome_beyond_the_models_range_is_refused_naming_it(
    credit: AsgiHarness, bundles: Bundles, trail: Trail, outcome: Any
) -> None:
    predict(credit, bundles, "amount", slice(0, 1))
    r = credit.post(
        "/feedback",
        json={"outcomes": [{"request_id": "amount", "outcome": outcome}]},
        headers=bearer(FEEDER),
    )
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert (err["code"], err["field"]) == ("out_of_range", "outcomes[0].outcome")
    low, high = target_range(credit)
    assert f"{low:.6g} to {high:.6g}" in err["message"], err
    assert trail.rows("select count(*) from iabma_outcomes")[0][0] == 0
    assert credit.get("/performance", headers=AUDITOR).status_code == 200


def test_the_edges_of_the_range_are_taken_and_scored_finite(
    credit: AsgiHarness, bundles: Bundles
) -> None:
    predict(credit, bundles, "edges", slice(0, 2))
    low, high = target_range(credit)
    r = credit.post(
        "/feedback",
        json={"outcomes": [{"request_id": "edges", "outcome": low},
                           {"request_id": "edges", "row": 1, "outcome": high}]},
        headers=bearer(FEEDER),
    )  # fmt: skip
    assert r.status_code == 200, r.text
    body = credit.get("/performance", headers=AUDITOR).json()
    assert body["rows"] == 2 and body["excluded_rows"] == 0
    assert 0 < body["mixture"]["nll"] <= 690.8 and body["mixture"]["rmse"] > 0


def test_rows_an_older_release_stored_never_break_performance(
    credit: AsgiHarness, bundles: Bundles, trail: Trail
) -> None:
    """1e300 and -1.7e308 stored before the range was checked (their scores inf or
    astronomically large), and a row whose blobs were cut: /performance stays 200, counts
    them in excluded_rows, and reports the rest as before."""
    predict(credit, bundles, "old", slice(0, 4))
    outcomes = [{"request_id": "old", "row": k, "outcome": 2000.0 + k} for k in range(4)]
    assert credit.post("/feedback", json={"outcomes": outcomes}, headers=bearer(FEEDER)).is_success
    before = credit.get("/performance", headers=AUDITOR).json()
    inf = np.full(12, np.inf).tobytes()
    trail.execute(f"update iabma_outcomes set outcome = '1e+300', scores = {trail.blob(inf)} "
                  "where row_index = 0")  # fmt: skip
    huge = np.full(12, 1e250).tobytes()
    trail.execute(f"update iabma_outcomes set outcome = '-1.7e+308', scores = {trail.blob(huge)} "
                  "where row_index = 1")  # fmt: skip
    trail.execute(f"update iabma_outcomes set weights = {trail.blob(b'x')} where row_index = 2")
    r = credit.get("/performance", headers=AUDITOR)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["rows"], body["excluded_rows"]) == (1, 3)
    for params in ({}, {"buckets": "200"}, {"since": "0001-01-01T00:00:00"},
                   {"until": "9999-12-31T23:59:59.999999"}):  # fmt: skip
        assert credit.get("/performance", params=params, headers=AUDITOR).status_code == 200
    assert body["mixture"]["nll"] is not None and np.isfinite(body["mixture"]["nll"])
    assert before["rows"] == 4
    assert labelled_rows(make_engine(trail.url, 10.0), "credit")[0], "refit's reader too"


def test_each_outcome_keeps_its_poster_who_can_be_left_out(
    credit: AsgiHarness, bundles: Bundles, trail: Trail
) -> None:
    predict(credit, bundles, "mine", slice(0, 2))
    predict(credit, bundles, "theirs", slice(2, 5))
    one = credit.post(
        "/feedback", json={"outcomes": [{"request_id": "mine", "outcome": 1000},
                                        {"request_id": "mine", "row": 1, "outcome": 1200}]},
        headers=bearer(FEEDER),
    )  # fmt: skip
    two = credit.post(
        "/feedback",
        json={"outcomes": [{"request_id": "theirs", "row": k, "outcome": 9000} for k in range(3)]},
        headers=bearer(OTHER),
    )
    assert one.status_code == two.status_code == 200, (one.text, two.text)
    me, them = one.json()["poster"], two.json()["poster"]
    assert me == poster_of(KEY, FEEDER) and them == poster_of(KEY, OTHER) and me != them
    stored = trail.rows("select poster, received_us from iabma_outcomes order by id")
    assert [p for p, _ in stored] == [me, me, them, them, them]
    assert all(int(t) > 0 for _, t in stored)
    assert FEEDER not in json.dumps(stored, default=str), "never the key itself"
    body = credit.get("/performance", headers=AUDITOR).json()
    assert body["rows"] == 5 and body["posters"] == {me: 2, them: 3}
    left = credit.get("/performance", params={"exclude_poster": them}, headers=AUDITOR).json()
    assert left["rows"] == 2 and left["posters"] == {me: 2}
    assert left["filter"]["exclude_poster"] == [them]
    both = credit.get(
        "/performance", params={"exclude_poster": f"{me},{them}"}, headers=AUDITOR
    ).json()
    assert both["rows"] == 0
    engine = make_engine(trail.url, 10.0)
    try:
        rows, inputs = labelled_rows(engine, "credit", exclude_posters=[them])
        assert [r.request_id for r in rows] == ["mine", "mine"] and len(inputs) == 1
        assert {r.poster for r in labelled_rows(engine, "credit")[0]} == {me, them}
    finally:
        engine.dispose()


def test_an_open_route_records_no_poster(bundles: Bundles, trail: Trail, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path, audit_url=trail.url)
    with AsgiHarness(settings) as app:
        r = app.post("/predict", json={"instances": bundles.demo.instances([0])},
                     headers={"X-Request-ID": "open"})  # fmt: skip
        assert r.status_code == 200
        r = app.post("/feedback", json={"outcomes": [{"request_id": "open", "outcome": 1}]},
                     headers=bearer("anything-at-all"))  # fmt: skip
        assert r.json()["poster"] is None, "a key nobody checked names no one"
        body = app.get("/performance").json()
        assert body["posters"] == {"anonymous": 1}
        assert app.get("/performance", params={"exclude_poster": "anonymous"}).json()["rows"] == 0


def _duplicate(trail: Trail, rid: str) -> None:
    """A second record under ``rid``, as a trail written before request ids were unique
    per model holds (the index on them made plain again first)."""
    trail.execute("drop index if exists ix_iabma_audit_log_request_id")
    trail.execute("create index ix_iabma_audit_log_request_id on iabma_audit_log (request_id)")
    columns = "request_id, created_us, version_id, n_instances, top, latency_us, " \
        "input_hash, input_json, answer"  # fmt: skip
    trail.execute(
        f"insert into iabma_audit_log ({columns}) select {columns} from iabma_audit_log "
        f"where request_id = {trail.rid(rid)}"
    )


def test_an_id_that_names_two_records_takes_no_outcome(
    credit: AsgiHarness, bundles: Bundles, trail: Trail
) -> None:
    predict(credit, bundles, "twice", slice(0, 1))
    predict(credit, bundles, "once", slice(1, 2))
    _duplicate(trail, "twice")
    r = credit.post("/feedback", json={"outcomes": [{"request_id": "twice", "outcome": 1000}]},
                    headers=bearer(FEEDER))  # fmt: skip
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert (err["code"], err["field"]) == ("ambiguous_request", "outcomes[0].request_id")
    assert "2 predictions of model 'credit'" in err["message"]
    mixed = credit.post(
        "/feedback",
        json={"outcomes": [{"request_id": "once", "outcome": 1000},
                           {"request_id": "twice", "outcome": 1000},
                           {"request_id": "once", "outcome": "x"}]},
        headers=bearer(FEEDER),
    )  # fmt: skip
    assert mixed.status_code == 422, mixed.text
    fields = [d["field"] for d in mixed.json()["error"]["details"]]
    assert fields == ["outcomes[1].request_id", "outcomes[2].outcome"]
    assert trail.rows("select count(*) from iabma_outcomes")[0][0] == 0


def test_two_posts_sharing_rows_in_opposite_orders_never_fail(
    bundles: Bundles, pg_url: str, tmp_path: Path
) -> None:
    """PostgreSQL: each outcome waits 0.3 s before its insert (a trigger), so
    two posts of the same rows in opposite orders overlap. In body order they deadlocked
    into a 500; in the unique key's order the second waits, then counts duplicates."""
    settings = make_settings(bundles.store, tmp_path, audit_url=pg_url)
    trail = Trail(pg_url, None)
    with AsgiHarness(settings) as app:
        for rid in ("a", "b", "c"):
            r = app.post("/predict", json={"instances": bundles.demo.instances([0])},
                         headers={"X-Request-ID": rid})  # fmt: skip
            assert r.status_code == 200
        trail.execute(
            "create function slow() returns trigger language plpgsql as "
            "$$ begin perform pg_sleep(0.3); return new; end $$"
        )
        trail.execute(
            "create trigger slow before insert on iabma_outcomes "
            "for each row execute function slow()"
        )
        items = [{"request_id": rid, "outcome": 1} for rid in ("a", "b", "c")]

        async def both() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=app.app)
            async with httpx.AsyncClient(transport=transport, base_url=app.base_url) as c:
                return list(
                    await asyncio.gather(
                        c.post("/feedback", json={"outcomes": items}),
                        c.post("/feedback", json={"outcomes": items[::-1]}),
                    )
                )

        first, second = app.run(both())
        assert first.status_code == second.status_code == 200, (first.text, second.text)
        counts = sorted((r.json()["accepted"], r.json()["duplicates"]) for r in (first, second))
        assert counts == [(0, 3), (3, 0)]
    assert trail.rows("select count(*) from iabma_outcomes")[0][0] == 3


@pytest.mark.parametrize(
    "edit",
    [
        "record_us = 9223372036854775807",
        "record_us = -9223372036854775808",
        "experts = 'not json'",
        'experts = \'["ridge", "ridge", "forest"]\'',
        "experts = '[]'",
        "experts = '{{\"a\": 1}}'",
        "scores = {nan}",
        "weights = {nan3}",
        "scores = {short}",
        "outcome = 'not a number'",
        "outcome = '1e+400'",
    ],
)
def test_stored_rows_of_any_shape_leave_performance_standing(
    credit: AsgiHarness, bundles: Bundles, trail: Trail, edit: str
) -> None:
    """Rows a database writer bent (audit-verify names them): each is left out, and the
    report stands."""
    predict(credit, bundles, "bent", slice(0, 2))
    outcomes = [{"request_id": "bent", "row": k, "outcome": 2000.0} for k in range(2)]
    assert credit.post("/feedback", json={"outcomes": outcomes}, headers=bearer(FEEDER)).is_success
    sql = edit.format(
        nan=trail.blob(np.full(12, np.nan).tobytes()),
        nan3=trail.blob(np.full(3, np.nan).tobytes()),
        short=trail.blob(b"\x00" * 8),
    )
    trail.execute(f"update iabma_outcomes set {sql} where row_index = 0")
    for params in ({}, {"buckets": "1"}, {"since": "2000-01-01"}):
        r = credit.get("/performance", params=params, headers=AUDITOR)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["rows"] == 1 and body["excluded_rows"] in (0, 1), body
        assert body["excluded_rows"] == 1 or "since" in params, "left out by since alone"


@pytest.mark.parametrize(
    "edit",
    [
        "update iabma_audit_versions set id = id + 1000",
        "update iabma_audit_log set answer = {short}",
        "update iabma_audit_log set n_instances = 7",
    ],
)
def test_a_record_bent_in_the_database_takes_no_outcome_and_no_500(
    credit: AsgiHarness, bundles: Bundles, trail: Trail, edit: str
) -> None:
    predict(credit, bundles, "bent", slice(0, 1))
    trail.execute(edit.format(short=trail.blob(b"\x01\x02")))
    credit.service.store.versions._by_id.clear()  # as a restarted server would read them
    r = credit.post("/feedback", json={"outcomes": [{"request_id": "bent", "outcome": 1000}]},
                    headers=bearer(FEEDER))  # fmt: skip
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert (err["code"], err["field"]) == ("not_scorable", "outcomes[0].request_id")
    assert "audit-verify" in err["message"]
