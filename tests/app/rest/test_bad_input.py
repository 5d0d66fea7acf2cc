"""Every kind of bad input gets a 4xx naming the field and the fault, and changes nothing."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from app.audit.write.trail_db import RecordFilter
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, harness
from tests.support.metrics import totals
from tests.support.services import wait_for

Client = AsgiHarness | UvicornHarness
MAX_ROWS = 5
MAX_BYTES = 2048
OK_ROW = {"x1": 0.5, "x2": -0.5}


@dataclass(frozen=True)
class Case:
    id: str
    body: Any  # JSON-able, or bytes sent as they are
    status: int
    code: str
    field: str
    says: str  # a fragment the message must contain
    headers: dict[str, str] | None = None
    model: str = "demo"


def rows(*items: Any) -> dict[str, Any]:
    return {"instances": list(items)}


CREDIT_ROW = {
    "checking_status": "<0", "duration": 6.0, "credit_history": "existing paid",
    "purpose": "radio/tv", "savings_status": "<100", "employment": ">=7",
    "installment_commitment": 4.0, "personal_status": "male single", "other_parties": "none",
    "residence_since": 4.0, "property_magnitude": "real estate", "age": 67.0,
    "other_payment_plans": "none", "housing": "own", "existing_credits": 2.0, "job": "skilled",
    "num_dependents": 1.0, "own_telephone": "yes", "foreign_worker": "yes", "class": "good",
}  # fmt: skip

CASES = [
    Case(
        "missing feature",
        rows({"x1": 1.0}),
        422,
        "missing_feature",
        "instances[0].x2",
        "missing feature",
    ),
    Case(
        "unknown feature",
        rows({**OK_ROW, "x3": 1}),
        422,
        "unknown_feature",
        "instances[0].x3",
        "the model takes x1, x2",
    ),
    Case(
        "a feature name in another case or with spaces",
        rows({"X1 ": 1.0, "x2": 1.0}),
        422,
        "unknown_feature",
        "instances[0].X1 ",
        'unknown feature; did you mean "x1"? names match exactly, spaces and case included',
    ),
    Case(
        "a feature name in another Unicode form",
        rows({"\uff58\uff11\u00a0": 1.0, "x2": 1.0}),  # full-width x and 1, no-break space
        422,
        "unknown_feature",
        "instances[0].\uff58\uff11\u00a0",
        'unknown feature "\uff58\uff11\\u00a0"; did you mean "x1"?',
    ),
    Case(
        "a feature name behind a byte-order mark",  # a UTF-8 file read as utf-8, not utf-8-sig
        rows({"\ufeffx1": 1.0, "x2": 1.0}),
        422,
        "unknown_feature",
        "instances[0].\ufeffx1",
        'unknown feature "\\ufeffx1"; did you mean "x1"?',
    ),
    Case(
        "an out-of-range number of 1,500 digits is not echoed whole",
        rows({"x1": "9" * 1500, "x2": 1.0}),
        422,
        "out_of_range",
        "instances[0].x1",
        '"9999999999999999999999999999999999999999"... is outside the float32 range',
    ),
    Case(
        "string for a number",
        rows(OK_ROW, {"x1": "abc", "x2": 1}),
        422,
        "wrong_type",
        "instances[1].x1",
        'expected a number or null, got "abc"',
    ),
    Case(
        "bool for a number",
        rows({"x1": True, "x2": 1}),
        422,
        "wrong_type",
        "instances[0].x1",
        "got true",
    ),
    Case(
        "object for a number",
        rows({"x1": {"v": 1}, "x2": 1}),
        422,
        "wrong_type",
        "instances[0].x1",
        "got an object",
    ),
    Case(
        "NaN",
        b'{"instances": [{"x1": NaN, "x2": 1}]}',
        422,
        "not_finite",
        "instances[0].x1",
        "NaN is not allowed",
    ),
    Case(
        "-Infinity",
        b'{"instances": [{"x1": 1, "x2": -Infinity}]}',
        422,
        "not_finite",
        "instances[0].x2",
        "-Infinity is not allowed",
    ),
    Case(
        "overflowing literal",
        b'{"instances": [{"x1": 1e999, "x2": 1}]}',
        422,
        "not_finite",
        "instances[0].x1",
        "not a finite number",
    ),
    Case(
        "beyond float32",
        rows({"x1": 1e39, "x2": 1}),
        422,
        "out_of_range",
        "instances[0].x1",
        "float32",
    ),
    Case("empty batch", rows(), 422, "empty_batch", "instances", "empty batch"),
    Case(
        "too many rows",
        rows(*[OK_ROW] * (MAX_ROWS + 1)),
        413,
        "too_many_rows",
        "instances",
        "IABMA_MAX_BATCH_ROWS",
    ),
    Case(
        "body too large",
        rows(*[{"x1": 1.0, "x2": 2.0, "pad": "x" * 100}] * 30),
        413,
        "payload_too_large",
        "body",
        "IABMA_MAX_BODY_BYTES",
    ),
    Case(
        "malformed JSON",
        b'{"instances": [',
        400,
        "invalid_json",
        "body",
        "malformed JSON at line 1 column",
    ),
    Case("empty body", b"", 400, "invalid_json", "body", "empty body"),
    Case("not UTF-8", b'{"instances": [{"x1": "\xff"}]}', 400, "invalid_json", "body", "UTF-8"),
    Case(
        "duplicate key",
        b'{"instances": [{"x1": 1, "x1": 2, "x2": 0}]}',
        400,
        "invalid_json",
        "body",
        "'x1' appears twice",
    ),
    Case(
        "text/plain",
        rows(OK_ROW),
        415,
        "unsupported_media_type",
        "header Content-Type",
        "expected application/json, got 'text/plain'",
        {"content-type": "text/plain"},
    ),
    Case(
        "form content type",
        rows(OK_ROW),
        415,
        "unsupported_media_type",
        "header Content-Type",
        "application/x-www-form-urlencoded",
        {"content-type": "application/x-www-form-urlencoded"},
    ),
    Case("body not an object", [OK_ROW], 422, "wrong_type", "body", "got an array"),
    Case(
        "instances not an array",
        {"instances": OK_ROW},
        422,
        "wrong_type",
        "instances",
        "expected an array of objects",
    ),
    Case(
        "row not an object",
        rows(OK_ROW, [1, 2]),
        422,
        "wrong_type",
        "instances[1]",
        "expected an object, got an array",
    ),
    # Was a 500 (schemathesis, through OIP infer): the JSON reader's duplicate-key count
    # took len() of every item of a list that starts with an object.
    Case(
        "null after a row",
        rows(OK_ROW, None),
        422,
        "wrong_type",
        "instances[1]",
        "expected an object, got null",
    ),
    Case(
        "no instances",
        {"rows": [OK_ROW]},
        422,
        "unknown_field",
        "rows",
        "the body takes instances, format, include",
    ),
    Case("missing instances", {}, 422, "missing_field", "instances", "missing"),
    Case(
        "bad X-Request-ID",
        rows(OK_ROW),
        400,
        "invalid_header",
        "header X-Request-ID",
        "1-128 characters",
        {"x-request-id": "bad id with spaces"},
    ),
    Case(
        "unknown category",
        rows({**CREDIT_ROW, "purpose": "spaceship"}),
        422,
        "unknown_category",
        "instances[0].purpose",
        'unknown category "spaceship"; known: ["business", "domestic appliance"',
        model="credit",
    ),
    # Was a reset connection: the unknown category was echoed in the message, and a lone
    # surrogate cannot be encoded as UTF-8. Schemathesis sent it (through OIP infer).
    Case(
        "lone surrogate escape",
        rows({**CREDIT_ROW, "purpose": "\ud800"}),
        400,
        "invalid_json",
        "body",
        "unpaired surrogate",
        model="credit",
    ),
    Case(
        "list for a category",
        rows({**CREDIT_ROW, "housing": ["own"]}),
        422,
        "wrong_type",
        "instances[0].housing",
        "expected a string or null, got an array",
        model="credit",
    ),
]


@pytest.fixture(scope="module", params=["asgi", "uvicorn"])
def apps(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Client]]:
    limits = {"max_batch_rows": MAX_ROWS, "max_body_bytes": MAX_BYTES}
    demo_settings = make_settings(bundles.store, tmp_path_factory.mktemp("a"), "demo", **limits)
    credit_settings = make_settings(bundles.store, tmp_path_factory.mktemp("b"), "credit", **limits)
    with (
        harness(request.param, demo_settings) as demo,
        harness(request.param, credit_settings) as credit,
    ):
        yield {"demo": demo, "credit": credit}


def trail_size(app: Client) -> int:
    store = app.service.store
    assert store is not None
    return store.aggregate(RecordFilter(model=app.service.labels()[0]))["records"]


def send(app: Client, case: Case) -> httpx.Response:
    headers = {"content-type": "application/json", **(case.headers or {})}
    raw = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    return app.post("/predict", content=raw, headers=headers)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_a_clear_4xx_and_changes_nothing(apps: dict[str, Client], case: Case) -> None:
    app = apps[case.model]
    counted = ("iabma_predicted_rows_total", "iabma_gate_weight_count")
    # Only this bundle's series: the other app in this process flushes its own counts
    # (from its last request) into the shared values once a second, at any moment.
    mine = {"model_name": case.model}
    records, before = trail_size(app), totals(app, *counted, **mine)
    r = send(app, case)
    assert r.status_code == case.status, r.text
    err = r.json()["error"]
    assert err["code"] == case.code
    assert err["field"] == case.field
    assert err["message"].startswith(case.field + ": ")
    assert case.says in err["message"]
    assert "Traceback" not in r.text
    assert trail_size(app) == records
    assert totals(app, *counted, **mine) == before
    ok = app.post("/predict", json={"instances": [OK_ROW if case.model == "demo" else CREDIT_ROW]})
    assert ok.status_code == 200, ok.text
    assert trail_size(app) == records + 1


def test_every_fault_is_listed(apps: dict[str, Client]) -> None:
    r = apps["demo"].post(
        "/predict", json=rows({"x1": "a"}, {"x1": 1, "x2": None, "zz": 0}, {"x1": None, "x2": "b"})
    )
    assert r.status_code == 422
    details = r.json()["error"]["details"]
    assert [(d["code"], d["field"]) for d in details] == [
        ("wrong_type", "instances[0].x1"),
        ("missing_feature", "instances[0].x2"),
        ("unknown_feature", "instances[1].zz"),
        ("wrong_type", "instances[2].x2"),
    ]


def test_chunked_body_over_the_limit(apps: dict[str, Client]) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"instances": ['
        for _ in range(100):
            yield b'{"x1": 1.0, "x2": 2.0},'
        yield b'{"x1": 1.0, "x2": 2.0}]}'

    app = apps["demo"]
    if isinstance(app, UvicornHarness):
        r = httpx.post(
            app.base_url + "/predict",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
    else:
        r = app.post(
            "/predict", content=b"".join(chunks()), headers={"content-type": "application/json"}
        )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"


def test_wrong_method_and_unknown_route(apps: dict[str, Client]) -> None:
    app = apps["demo"]
    r = app.get("/predict")
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    r = app.get("/nowhere")
    assert r.status_code == 404
    assert r.json()["error"] == {
        "code": "not_found",
        "message": "path: no such route: GET /nowhere",
        "field": "path",
    }


@pytest.mark.parametrize("path", ["/predict", "/v2/models/demo/infer"])
def test_a_client_that_hangs_up_mid_body_is_a_499_not_a_server_error(
    apps: dict[str, Client], path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found under load: each such client was logged as an unhandled error with two
    tracebacks and counted as a 500, which pages whoever watches the 5xx rate."""
    app = apps["demo"]
    if not isinstance(app, UvicornHarness):
        pytest.skip("needs a real socket to hang up on")
    counted = ("iabma_http_requests_total",)
    mine = {"model_name": "demo", "route": path.replace("demo", "{name}")}
    records = trail_size(app)
    before_499 = totals(app, *counted, **mine, status="499")
    before_500 = totals(app, *counted, **mine, status="500")
    host, port = app.base_url.removeprefix("http://").split(":")
    body = json.dumps(rows(OK_ROW)).encode()
    with caplog.at_level("INFO"), socket.create_connection((host, int(port))) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) + 100}\r\n\r\n"
        )
        connections = app.server.server_state.connections
        me = sock.getsockname()[:2]
        sock.sendall(head.encode() + body)

        def started() -> bool:  # uvicorn has read the head and started the app on it
            return any(c.client == me and c.cycle is not None for c in connections)

        wait_for(started, 10, "the server to take the request")
    deadline = time.monotonic() + 10
    while totals(app, *counted, **mine, status="499") == before_499:
        assert time.monotonic() < deadline, "the hang-up was never counted as 499"
        time.sleep(0.05)
    assert totals(app, *counted, **mine, status="500") == before_500
    assert trail_size(app) == records
    errors = [r for r in caplog.records if r.levelname in {"ERROR", "CRITICAL"}]
    assert errors == [], [r.getMessage() for r in errors]
    assert app.post("/predict", json=rows(OK_ROW)).status_code == 200
