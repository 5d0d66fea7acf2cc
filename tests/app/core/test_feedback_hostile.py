"""A hostile corpus for POST /feedback and GET /performance, on a classification and a
regression bundle over one SQLite trail each: every odd body, item, outcome and query is
a 4xx naming its field (or, where it is a fine outcome after all, a 200), never a 5xx;
and /performance answers 200 after each.

The trail holds, besides the app's own predictions, a record of another model, an
archived request id and an id held twice (as a trail written before ids were unique).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.audit.store.packing import pack_request_id
from app.audit.write.trail_db import AuditStore
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.services import make_record
from tests.support.tampering import KEY

ROWS = 3  # rows of the prediction "p"


class Served:
    def __init__(self, app: AsgiHarness, name: str, trail: Path) -> None:
        self.app, self.name, self.trail = app, name, trail

    def post(self, body: Any = None, raw: bytes | None = None, **kw: Any) -> Any:
        if raw is not None:
            headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
            return self.app.post("/feedback", content=raw, headers=headers, **kw)
        return self.app.post("/feedback", json=body, **kw)

    def still_reports(self) -> None:
        r = self.app.get("/performance")
        assert r.status_code == 200, r.text
        json.dumps(r.json(), allow_nan=False)


@pytest.fixture(scope="module", params=["demo", "credit"])
def served(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    name = request.param
    where = tmp_path_factory.mktemp(f"hostile-{name}")
    file = where / "audit.db"
    url = f"sqlite:///{file}"
    store = AuditStore(url, 10.0, KEY)
    store.prepare()
    store.insert([make_record("of-another-model")])  # model "demo" of make_record: renamed
    store.close()
    with sqlite3.connect(file) as conn:
        conn.execute("update iabma_audit_versions set model = 'elsewhere'")
        conn.execute(
            "insert into iabma_audit_archived (request_id, day) values (?, '2026-01-02')",
            (pack_request_id("gone"),),
        )
    settings = make_settings(
        bundles.store, where, name, audit_url=url, audit_hash_key=TEST_HASH_KEY
    )
    trained = getattr(bundles, name)
    with AsgiHarness(settings) as app:
        for rid, rows in (("p", slice(0, ROWS)), ("q", slice(ROWS, ROWS + 1))):
            r = app.post("/predict", json={"instances": trained.instances(rows)},
                         headers={"X-Request-ID": rid})  # fmt: skip
            assert r.status_code == 200, r.text
        r = app.post("/predict", json={"instances": trained.instances([5])},
                     headers={"X-Request-ID": "twice"})  # fmt: skip
        assert r.status_code == 200
        with sqlite3.connect(file) as conn:
            conn.execute("drop index if exists ix_iabma_audit_log_request_id")
            columns = "request_id, created_us, version_id, n_instances, top, latency_us, " \
                "input_hash, input_json, answer"  # fmt: skip
            conn.execute(
                f"insert into iabma_audit_log ({columns}) select {columns} from "
                "iabma_audit_log where request_id = ?",
                (pack_request_id("twice"),),
            )
        yield Served(app, name, file)


def good(served: Served) -> Any:
    """A valid outcome for row 0 of "p", as the bundle's task takes it."""
    return 1 if served.name == "demo" else 2500.0


def item(**kw: Any) -> dict[str, Any]:
    return {"request_id": "p", "row": 0, "outcome": 1, **kw}


# (name, body, status, field); the outcome "GOOD" is replaced by a valid one.
BODIES: list[tuple[str, Any, int, str]] = [
    ("null", None, 422, "body"),
    ("a list", [], 422, "body"),
    ("a number", 1, 422, "body"),
    ("a string", "x", 422, "body"),
    ("true", True, 422, "body"),
    ("empty object", {}, 422, "outcomes"),
    ("outcomes null", {"outcomes": None}, 422, "outcomes"),
    ("outcomes an object", {"outcomes": {}}, 422, "outcomes"),
    ("outcomes a string", {"outcomes": "p"}, 422, "outcomes"),
    ("outcomes a number", {"outcomes": 3}, 422, "outcomes"),
    ("outcomes empty", {"outcomes": []}, 422, "outcomes"),
    ("an unknown key", {"outcomes": [item()], "extra": 1}, 422, "extra"),
    ("the key's case", {"Outcomes": [item()]}, 422, "Outcomes"),
    ("10k outcomes", {"outcomes": [item(row=k % ROWS) for k in range(10_000)]}, 413, "outcomes"),
    ("item null", {"outcomes": [None]}, 422, "outcomes[0]"),
    ("item a number", {"outcomes": [7]}, 422, "outcomes[0]"),
    ("item a list", {"outcomes": [["p", 0, 1]]}, 422, "outcomes[0]"),
    ("item a string", {"outcomes": ["p"]}, 422, "outcomes[0]"),
    ("item empty", {"outcomes": [{}]}, 422, "outcomes[0].request_id"),
    ("no request id", {"outcomes": [{"outcome": 1}]}, 422, "outcomes[0].request_id"),
    ("no outcome", {"outcomes": [{"request_id": "p"}]}, 422, "outcomes[0].outcome"),
    ("an unknown field", {"outcomes": [item(weight=1)]}, 422, "outcomes[0].weight"),
    ("a second bad item", {"outcomes": [item(outcome="GOOD"), 5]}, 422, "outcomes[1]"),
]
REQUEST_IDS: list[tuple[str, Any, int, str]] = [
    ("id a number", 12, 422, "request_id"),
    ("id null", None, 422, "request_id"),
    ("id a list", ["p"], 422, "request_id"),
    ("id an object", {"id": "p"}, 422, "request_id"),
    ("id true", True, 422, "request_id"),
    ("id empty", "", 422, "request_id"),
    ("id 129 characters", "x" * 129, 422, "request_id"),
    ("id 100 kB", "x" * 100_000, 422, "request_id"),
    ("id with a newline", "p\n", 422, "request_id"),
    ("id with a space", "p q", 422, "request_id"),
    ("id with NUL", "p\x00", 422, "request_id"),
    ("id with a path", "../p", 422, "request_id"),
    ("id unicode", "pé", 422, "request_id"),
    ("id of no prediction", "never-seen", 422, "request_id"),
    ("id of another model", "of-another-model", 422, "request_id"),
    ("id archived", "gone", 410, "request_id"),
    ("id held twice", "twice", 409, "request_id"),
    ("id differs in case", "P", 422, "request_id"),
]
ROWS_: list[tuple[str, Any, int, str]] = [
    ("row -1", -1, 422, "row"),
    ("row beyond", ROWS, 422, "row"),
    ("row huge", 10**20, 422, "row"),
    ("row 2**63", 2**63, 422, "row"),
    ("row a float", 1.5, 422, "row"),
    ("row 1.0", 1.0, 422, "row"),
    ("row text", "0", 422, "row"),
    ("row true", True, 422, "row"),
    ("row null", None, 422, "row"),
    ("row a list", [0], 422, "row"),
]
# Odd outcomes for either task: (name, outcome, status); 200 where it reads as a value.
OUTCOMES: list[tuple[str, Any, int]] = [
    ("outcome null", None, 422),
    ("outcome a list", [1], 422),
    ("outcome empty list", [], 422),
    ("outcome an object", {"value": 1}, 422),
    ("outcome nested", {"a": {"b": [1, {"c": 2}]}}, 422),
    ("outcome true", True, 422),
    ("outcome false", False, 422),
    ("outcome empty text", "", 422),
    ("outcome blank text", "   ", 422),
    ("outcome NA text", "NA", 422),
    ("outcome NaN text", "NaN", 422),
    ("outcome nan text", "nan", 422),
    ("outcome inf text", "inf", 422),
    ("outcome -Infinity text", "-Infinity", 422),
    ("outcome 1e400 text", "1e400", 422),
    ("outcome 1e300", 1e300, 422),
    ("outcome -1.7e308", -1.7e308, 422),
    ("outcome 10**30", 10**30, 422),
    ("outcome -(10**30)", -(10**30), 422),
    ("outcome 10**400", 10**400, 422),
    ("outcome words", "a lot", 422),
    ("outcome 0x10", "0x10", 422),
    ("outcome 100 kB", "9" * 100_000, 422),
    ("outcome with NUL", "1\x00", 422),
]
CLASS_OUTCOMES: list[tuple[str, Any, int]] = [
    ("class 2", 2, 422),
    ("class -1", -1, 422),
    ("class 1.5", 1.5, 422),
    ("class '2'", "2", 422),
    ("class 'one'", "one", 422),
    ("class 1", 1, 200),
    ("class '1'", "1", 200),
    ("class 1.0", 1.0, 200),
    ("class ' 1 '", " 1 ", 200),
]
NUMBER_OUTCOMES: list[tuple[str, Any, int]] = [
    ("number 2500", 2500, 200),
    ("number '2 500'", "2 500", 200),
    ("number -0.0", -0.0, 200),
    ("number 0", 0, 200),
    ("number 1e-300", 1e-300, 200),
    ("number a label", "good", 422),
]


def _check(r: Any, status: int, field: str) -> None:
    assert r.status_code == status, r.text
    if status >= 400:
        assert len(r.content) < 4096, f"an error of {len(r.content)} bytes"
        err = r.json()["error"]
        assert err["field"] == field, err
        assert err["message"].startswith(field) or not field, err


@pytest.mark.parametrize(("case", "body", "status", "field"), BODIES, ids=[c[0] for c in BODIES])
def test_odd_bodies(served: Served, case: str, body: Any, status: int, field: str) -> None:
    text = json.dumps(body).replace('"GOOD"', json.dumps(good(served)))
    r = served.post(raw=text.encode())
    _check(r, status, field)
    served.still_reports()


@pytest.mark.parametrize(
    ("case", "rid", "status", "field"), REQUEST_IDS, ids=[c[0] for c in REQUEST_IDS]
)
def test_odd_request_ids(served: Served, case: str, rid: Any, status: int, field: str) -> None:
    r = served.post({"outcomes": [item(request_id=rid, outcome=good(served))]})
    _check(r, status, f"outcomes[0].{field}")
    served.still_reports()


@pytest.mark.parametrize(("case", "row", "status", "field"), ROWS_, ids=[c[0] for c in ROWS_])
def test_odd_rows(served: Served, case: str, row: Any, status: int, field: str) -> None:
    r = served.post({"outcomes": [item(row=row, outcome=good(served))]})
    _check(r, status, f"outcomes[0].{field}")
    served.still_reports()


@pytest.mark.parametrize(
    ("case", "outcome", "status"),
    OUTCOMES + CLASS_OUTCOMES + NUMBER_OUTCOMES,
    ids=[c[0] for c in OUTCOMES + CLASS_OUTCOMES + NUMBER_OUTCOMES],
)
def test_odd_outcomes(served: Served, case: str, outcome: Any, status: int) -> None:
    if case.startswith("class") and served.name != "demo":
        pytest.skip("a classification outcome")
    if case.startswith("number") and served.name == "demo":
        pytest.skip("a regression outcome")
    # Row 1 of "q" does not exist; the rows of "p" take an outcome once: row 2 for these.
    r = served.post({"outcomes": [item(row=2, outcome=outcome)]})
    if status == 200 and r.status_code == 409:
        pytest.fail(f"a second fine outcome for one row: {r.text}")
    _check(r, status, "outcomes[0].outcome")
    if status == 200:
        served.app.service.store.engine.dispose()
        with sqlite3.connect(served.trail) as conn:
            conn.execute("delete from iabma_outcomes where row_index = 2")
            conn.execute("delete from iabma_outcome_links")
    served.still_reports()


RAW: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("empty", b"", {}, 400, "body"),
    ("half an object", b'{"outcomes": [', {}, 400, "body"),
    ("trailing text", b'{"outcomes": []} x', {}, 400, "body"),
    ("not UTF-8", b'{"outcomes": ["\xff"]}', {}, 400, "body"),
    ("a NaN token", b'{"outcomes": [{"request_id": "p", "outcome": NaN}]}', {}, 422,
     "outcomes[0].outcome"),
    ("an Infinity token", b'{"outcomes": [{"request_id": "p", "outcome": -Infinity}]}', {},
     422, "outcomes[0].outcome"),
    ("1e400", b'{"outcomes": [{"request_id": "p", "outcome": 1e400}]}', {}, 422,
     "outcomes[0].outcome"),
    ("a duplicated key", b'{"outcomes": [], "outcomes": []}', {}, 400, "body"),
    ("deep nesting", b'{"outcomes": [{"request_id": "p", "outcome": ' + b"[" * 100_000
     + b"]" * 100_000 + b"}]}", {}, 400, "body"),
    ("plain text", b'{"outcomes": []}', {"Content-Type": "text/plain"}, 415, "header Content-Type"),
    ("a form", b"outcomes=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415,
     "header Content-Type"),
    ("gzip that is not", b"not gzip", {"Content-Encoding": "gzip"}, 400, "body"),
    ("over the size limit", b" " * (8 * 1024 * 1024 + 1), {}, 413, "body"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "raw", "headers", "status", "field"), RAW, ids=[c[0] for c in RAW]
)
def test_odd_bytes(
    served: Served, case: str, raw: bytes, headers: dict[str, str], status: int, field: str
) -> None:
    r = served.post(raw=raw, headers=headers)
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field, r.text
    served.still_reports()


def test_a_gzipped_body_is_read(served: Served) -> None:
    body = json.dumps({"outcomes": [item(row=1, outcome=good(served))]}).encode()
    r = served.post(raw=gzip.compress(body), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    served.still_reports()


def test_rows_repeated_inside_one_post(served: Served) -> None:
    same = item(request_id="q", outcome=good(served))
    r = served.post({"outcomes": [same, same, same]})
    assert r.status_code == 200 and r.json()["duplicates"] == 2, r.text
    other = 0 if served.name == "demo" else 100.0
    differs = served.post({"outcomes": [item(request_id="q", outcome=other), same]})
    assert differs.status_code == 422, differs.text
    assert differs.json()["error"]["field"] == "outcomes[1].outcome"
    assert "differs from outcomes[0].outcome" in differs.json()["error"]["message"]
    stored = served.post({"outcomes": [item(request_id="q", outcome=other)]})
    assert stored.status_code == 409, stored.text
    served.still_reports()


def test_every_fault_of_a_post_is_listed_up_to_twenty(served: Served) -> None:
    r = served.post({"outcomes": [item(row=-1)] * 50})
    assert r.status_code == 422
    details = r.json()["error"]["details"]
    assert len(details) == 20 and details[19]["field"] == "outcomes[19].row"


PERFORMANCE: list[tuple[str, Any, int, str]] = [
    ("since empty", {"since": ""}, 422, "since"),
    ("since words", {"since": "yesterday"}, 422, "since"),
    ("since month 13", {"since": "2026-13-01"}, 422, "since"),
    ("since year 0", {"since": "0000-01-01"}, 422, "since"),
    ("since offset 25 h", {"since": "2026-01-01T00:00:00+25:00"}, 422, "since"),
    ("since past 9999 in UTC", {"since": "9999-12-31T23:59:59-14:00"}, 422, "since"),
    ("since a number", {"since": "1700000000"}, 422, "since"),
    ("since NaN", {"since": "NaN"}, 422, "since"),
    ("since 10 kB", {"since": "2" * 10_000}, 422, "since"),
    ("since NUL", {"since": "2026-01-01\x00"}, 422, "since"),
    ("since the year 1", {"since": "0001-01-01T00:00:00"}, 200, ""),
    ("since with Z", {"since": "2026-01-01T00:00:00Z"}, 200, ""),
    ("until words", {"until": "tomorrow"}, 422, "until"),
    ("until before since", {"since": "2026-01-02", "until": "2026-01-01"}, 422, "until"),
    ("until equals since", {"since": "2026-01-01", "until": "2026-01-01"}, 422, "until"),
    ("until 9999", {"until": "9999-12-31T23:59:59"}, 200, ""),
    ("version empty", {"version": ""}, 422, "version"),
    ("version a path", {"version": "../v1"}, 422, "version"),
    ("version a slash", {"version": "a/b"}, 422, "version"),
    ("version 10 kB", {"version": "v" * 10_000}, 422, "version"),
    ("version NUL", {"version": "v\x00"}, 422, "version"),
    ("version unknown", {"version": "v0"}, 200, ""),
    ("exclude_poster empty", {"exclude_poster": ""}, 422, "exclude_poster"),
    ("exclude_poster a comma", {"exclude_poster": ","}, 422, "exclude_poster"),
    ("exclude_poster a key itself", {"exclude_poster": "secret-key"}, 422, "exclude_poster"),
    ("exclude_poster short", {"exclude_poster": "key:0123"}, 422, "exclude_poster"),
    ("exclude_poster upper", {"exclude_poster": "key:0123456789AB"}, 422, "exclude_poster"),
    ("exclude_poster 101", {"exclude_poster": ",".join(["anonymous"] * 101)}, 422,
     "exclude_poster"),
    ("exclude_poster unicode", {"exclude_poster": "key:０１２３４５６７８９ab"}, 422,
     "exclude_poster"),
    ("exclude_poster unseen", {"exclude_poster": "key:0123456789ab"}, 200, ""),
    ("exclude_poster spaced", {"exclude_poster": " key:0123456789ab , anonymous"}, 200, ""),
    ("buckets 0", {"buckets": "0"}, 422, "buckets"),
    ("buckets -1", {"buckets": "-1"}, 422, "buckets"),
    ("buckets 201", {"buckets": "201"}, 422, "buckets"),
    ("buckets 1e3", {"buckets": "1e3"}, 422, "buckets"),
    ("buckets 2.5", {"buckets": "2.5"}, 422, "buckets"),
    ("buckets empty", {"buckets": ""}, 422, "buckets"),
    ("buckets full-width", {"buckets": "１２"}, 422, "buckets"),
    ("buckets 10**30", {"buckets": "1" + "0" * 30}, 422, "buckets"),
    ("buckets 1", {"buckets": "1"}, 200, ""),
    ("buckets 200", {"buckets": "200"}, 200, ""),
    ("limit", {"limit": "10"}, 422, "limit"),
    ("expert", {"expert": "a"}, 422, "expert"),
    ("cursor", {"cursor": "x"}, 422, "cursor"),
    ("SINCE", {"SINCE": "2026-01-01"}, 422, "SINCE"),
    ("since twice", [("since", "2026-01-01"), ("since", "2026-01-02")], 422, "since"),
    ("buckets twice", [("buckets", "2"), ("buckets", "2")], 422, "buckets"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "params", "status", "field"), PERFORMANCE, ids=[c[0] for c in PERFORMANCE]
)
def test_odd_queries(served: Served, case: str, params: Any, status: int, field: str) -> None:
    r = served.app.get("/performance", params=params)
    _check(r, status, field)
    if status == 200:
        json.dumps(r.json(), allow_nan=False)
    served.still_reports()


def test_odd_methods(served: Served) -> None:
    for method, path in (("POST", "/performance"), ("PUT", "/feedback"), ("GET", "/feedback"),
                         ("DELETE", "/feedback"), ("PATCH", "/performance")):  # fmt: skip
        r = served.app.request(method, path)
        assert r.status_code == 405, (method, path, r.text)
    served.still_reports()
