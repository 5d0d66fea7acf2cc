"""The front middleware without CORS, where the two infer routes are answered as plain
ASGI: keys still guard them, refused requests keep their id, label and count, and every
answer echoes its request id."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bundles import Bundles, make_settings
from tests.support.harness import UvicornHarness
from tests.support.metrics import totals

KEY = "front-key"
ROW = {"instances": [{"x1": 0.4, "x2": -0.3}]}
OIP = {"inputs": [{"name": "x1", "shape": [1], "datatype": "FP64", "data": [0.4]},
                  {"name": "x2", "shape": [1], "datatype": "FP64", "data": [-0.3]}]}  # fmt: skip


@pytest.mark.parametrize(("path", "body"), [("/predict", ROW), ("/v2/models/demo/infer", OIP)])
def test_keys_guard_the_plain_routes_and_every_answer_keeps_its_id(
    bundles: Bundles, tmp_path: Path, path: str, body: dict
) -> None:
    settings = make_settings(bundles.store, tmp_path, api_keys=KEY)
    name, route = "iabma_http_requests_total", path.replace("demo", "{name}")
    with UvicornHarness(settings) as app:
        # Apps in one test process share the counters: compare before and after.
        labels = [("unmatched", "401"), (route, "400"), (route, "200")]
        before = [totals(app, name, route=r, status=s)[name] for r, s in labels]
        refused = app.post(path, json=body, headers={"X-Request-ID": "refused-1"})
        assert refused.status_code == 401, refused.text
        assert refused.headers["x-request-id"] == "refused-1"
        assert refused.headers["www-authenticate"] == "Bearer"
        auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        bad = app.post(path, content=b"{", headers=auth)
        assert bad.status_code == 400 and bad.headers["x-request-id"]
        ok = app.post(path, json=body, headers={"Authorization": f"Bearer {KEY}",
                                                 "X-Request-ID": "served-1"})  # fmt: skip
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-request-id"] == "served-1"
        assert ok.headers["content-type"] == "application/json"
        assert int(ok.headers["content-length"]) == len(ok.content)
        after = [totals(app, name, route=r, status=s)[name] for r, s in labels]
    # A refused request is counted before any route is chosen, as it always was.
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]


@pytest.mark.parametrize(
    ("path", "body", "codec"),
    [("/predict", ROW, "native"), ("/v2/models/demo/infer", OIP, "oip_answer")],
)
def test_a_fault_of_our_own_on_a_plain_route_is_a_500_logged_once_with_its_trace(
    bundles: Bundles,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict,
    codec: str,
) -> None:
    """Front runs before FastAPI's error layer: the plain routes answer a bug themselves,
    as FastAPI's handler answers it on the other routes."""
    import app.codecs as codecs  # the codec module the route calls, made to fail

    def broken(*_: object) -> bytes:
        raise RuntimeError("the answer could not be written")

    monkeypatch.setattr(getattr(codecs, codec), "encode", broken)
    name, route = "iabma_http_requests_total", path.replace("demo", "{name}")
    with UvicornHarness(make_settings(bundles.store, tmp_path)) as app:
        before = totals(app, name, route=route, status="500")[name]
        with caplog.at_level("ERROR", logger="iabma.errors"):
            r = app.post(path, json=body, headers={"X-Request-ID": "bug-1"})
        assert r.status_code == 500, r.text
        assert r.headers["x-request-id"] == "bug-1"
        assert "the answer could not be written" not in r.text  # no detail to the client
        assert totals(app, name, route=route, status="500")[name] == before + 1
    logged = [rec for rec in caplog.records if "unhandled error" in rec.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert path in logged[0].getMessage()
