"""Building calls: compact JSON bodies, gzip from a threshold, keys per route, query text."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from decimal import Decimal

import numpy as np
import pytest

from app.client.calls import Requests


def test_bodies_are_compact_json_and_gzip_above_the_threshold() -> None:
    rows = [{"x": float(i), "y": "a"} for i in range(100)]
    plain = Requests().predict(rows, dict, columnar=False, include=None, request_id=None)
    assert plain.body is not None and "Content-Encoding" not in plain.headers
    assert json.loads(plain.body) == {"instances": rows}
    small = Requests(gzip=True, gzip_min_bytes=10**6).predict(
        rows, dict, columnar=True, include=["weights"], request_id="rid"
    )
    assert "Content-Encoding" not in small.headers and small.request_id == "rid"
    packed = Requests(gzip=True, gzip_min_bytes=100).predict(
        rows, dict, columnar=True, include=("weights",), request_id=None
    )
    assert packed.headers["Content-Encoding"] == "gzip" and packed.body is not None
    assert json.loads(gzip.decompress(packed.body)) == {
        "instances": rows, "format": "columnar", "include": ["weights"],
    }  # fmt: skip
    assert len(packed.body) < len(plain.body) / 3
    with pytest.raises(TypeError, match="predict_frame"):
        Requests().predict({"x": [1.0]}, dict, columnar=False, include=None, request_id=None)
    with pytest.raises(ValueError, match="include"):
        Requests().predict(rows, dict, columnar=False, include=["everything"], request_id=None)


def test_keys_go_to_their_routes_and_query_values_are_text() -> None:
    calls = Requests(api_key="k1", auditor_key="aud")
    predict = calls.predict([{"x": 1}], dict, columnar=False, include=None, request_id=None)
    assert predict.headers["Authorization"] == "Bearer k1"
    assert calls.models().headers["Authorization"] == "Bearer k1"
    assert calls.page(limit=5).headers["Authorization"] == "Bearer aud"
    assert Requests(api_key="k1").record("r").headers["Authorization"] == "Bearer k1"
    assert "Authorization" not in Requests().models().headers
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert calls.page(since=since, expert="knn").params == (
        ("since", "2026-01-02T03:04:05+00:00"), ("expert", "knn"),
    )  # fmt: skip
    assert calls.gate({"a": 0.1, "b": None, "c": "red"}).params == (
        ("a", "0.1"), ("b", ""), ("c", "red"),
    )  # fmt: skip
    with pytest.raises(TypeError, match=r"features\['a'\]"):
        calls.gate({"a": [1, 2]})
    # numpy 2 writes np.float64(0.3) as its repr; a NUMERIC column reads as Decimal.
    assert calls.gate({"a": np.float64(0.3), "b": Decimal("1.50"), "c": np.int64(7)}).params == (
        ("a", "0.3"), ("b", "1.50"), ("c", "7"),
    )  # fmt: skip


def test_decimals_are_sent_as_numbers() -> None:
    body = (
        Requests()
        .predict(
            [{"x": Decimal("0.125"), "y": Decimal("-3")}],
            dict,
            columnar=False,
            include=None,
            request_id=None,
        )
        .body
    )
    assert json.loads(body)["instances"] == [{"x": 0.125, "y": -3.0}]
