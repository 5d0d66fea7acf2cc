"""The performance page draws what it has: point markers and gaps for sparse traffic, a
chosen number of time buckets, y labels with room for their minus signs, a constant gate
said to be one, and each feature's input drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.console.charts import CHAR_PX
from tests.support.bundles import Bundles, make_settings
from tests.support.console import SVG, check_page, seed
from tests.support.harness import AsgiHarness


def with_outcomes(app: AsgiHarness, bundles: Bundles, name: str, requests: int) -> None:
    """``requests`` audited predictions, each with its own label as the outcome."""
    trained = bundles.demo if name == "demo" else bundles.creditcls
    ids = seed(app, trained, requests, {})
    sent = []
    for rid in ids:
        record = app.get("/weights", params={"request_id": rid}).json()
        for i, p in enumerate(record["predictions"]):
            sent.append({"request_id": rid, "row": i, "outcome": p["prediction"]["label"]})
    assert app.post("/feedback", json={"outcomes": sent}).status_code == 200


def page(app: AsgiHarness, **params: str) -> Any:
    r = app.get("/audit/performance", params=params)
    assert r.status_code == 200, r.text
    return check_page(r.text)


def series(doc: Any, chart: str) -> dict[str, tuple[list[str], int, int]]:
    """Per series: its values as text, its markers and its polylines."""
    svg = next(s for s in doc.iter(SVG + "svg") if s.get("id") == chart)
    out = {}
    for g in svg.iter(SVG + "g"):
        if g.get("data-expert") is not None:
            markers = len(list(g.iter(SVG + "circle")))
            out[g.get("data-expert")] = (
                g.get("data-values").split(),
                markers,
                len(list(g.iter(SVG + "polyline"))),
            )
    return out


@pytest.fixture(scope="module")
def demo(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = make_settings(
        bundles.store, tmp_path_factory.mktemp("c"), audit_payload="full", drift_min_rows=20
    )
    with AsgiHarness(settings) as app:
        with_outcomes(app, bundles, "demo", 30)
        yield app


def test_each_value_has_a_marker_and_a_missing_one_is_a_gap(demo: AsgiHarness) -> None:
    # A day-long window of 24 buckets: every row falls in one bucket, as bursts do.
    doc = page(demo, since="2000-01-01T00:00", buckets="200")
    for name, (values, markers, _lines) in series(doc, "loss-chart").items():
        assert len(values) > 1 and markers == sum(v != "-" for v in values) >= 1, name
        assert "-" in values, "empty buckets are gaps"


def test_buckets_are_chosen_and_a_bad_count_is_named(demo: AsgiHarness) -> None:
    doc = page(demo, buckets="5")
    for values, _m, _l in series(doc, "loss-chart").values():
        assert len(values) == 5
    assert doc.find(".//input[@id='buckets']").get("value") == "5"
    r = demo.get("/audit/performance", params={"buckets": "0"})
    assert r.status_code == 422 and "buckets" in r.text


def test_y_labels_have_room_for_their_minus_signs(demo: AsgiHarness) -> None:
    doc = page(demo)
    svg = next(s for s in doc.iter(SVG + "svg") if s.get("id") == "trust-chart")
    axis = next(g for g in svg.iter(SVG + "g") if g.get("class") == "axis")
    left = float(next(axis.iter(SVG + "line")).get("x1"))
    labels = [t.text for t in axis.iter(SVG + "text") if t.get("text-anchor") == "end"]
    assert any(t.startswith("\u2212") for t in labels), labels  # the trust chart goes below 0
    assert all(left - 4 >= CHAR_PX * len(t) for t in labels), (left, labels)


def test_input_drift_is_on_the_page(demo: AsgiHarness, bundles: Bundles) -> None:
    doc = page(demo)
    cells = [td for td in doc.iter("td") if td.get("class") == "feature-psi"]
    assert {c.get("data-feature") for c in cells} == {"x1", "x2"}
    assert doc.find(".//p[@id='weight-drift-constant']") is None


def test_a_constant_gate_is_shown_as_one(bundles: Bundles, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path, "creditcls", drift_min_rows=20)
    with AsgiHarness(settings) as app:
        with_outcomes(app, bundles, "creditcls", 20)
        doc = page(app)
    assert doc.find(".//p[@id='weight-drift-constant']") is not None
    assert doc.find(".//p[@id='trust-constant']") is not None
    for name, (values, markers, _lines) in series(doc, "trust-chart").items():
        assert sum(v != "-" for v in values) == markers == 1, name  # one weight: one point
