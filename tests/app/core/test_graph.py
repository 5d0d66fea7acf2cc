"""Large requests off the event loop: in parts, the answer, its record and its refusals
are those of the whole request (app/core/graph.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import orjson
import pytest

from app.bundle.predictor import Prediction
from app.codecs import native
from app.core.graph import PART_ROWS, ROW_SECONDS, GraphThread
from app.core.plane import InferenceResult
from app.core.runtime import ModelRuntime
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import UvicornHarness

N = 2 * PART_ROWS + 187  # three parts: 233, 233 and 233 rows
OPTIONS = native.Options()


def _rows(bundles: Bundles) -> list[dict]:
    """N rows of the demo set, repeated as needed."""
    some = bundles.demo.instances(slice(0, N))
    return (some * -(-N // len(some)))[:N]


def _answers(body: bytes) -> list[dict]:
    return orjson.loads(body)["predictions"]


def _close(got: list[dict], want: list[dict], atol: float = 1e-12) -> None:
    """Equal answers, numbers within 1e-9: a graph run of fewer rows may round the last
    digits differently."""
    assert len(got) == len(want)
    flat = lambda rows: np.array(  # noqa: E731
        [v for r in rows for v in _numbers(r)], dtype=float
    )
    np.testing.assert_allclose(flat(got), flat(want), rtol=1e-9, atol=atol)
    labels = lambda rows: [r["prediction"]["label"] for r in rows]  # noqa: E731
    assert labels(got) == labels(want)


def _numbers(value: object) -> list[float]:
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _numbers(value[k])]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def test_parts_join_into_the_answer_of_the_whole_batch(bundles: Bundles, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path, "demo")
    model = asyncio.run(ModelRuntime(settings).load())
    body = {"instances": _rows(bundles)}
    request, opts = native.decode(body, model, 10_000)
    whole = model.predictor.predict(request.columns)
    graph = GraphThread()
    try:
        parts = native.RowParts(opts, "rid-1")
        pred, encoded, last = asyncio.run(graph.predict_in_parts(model, request, parts))
    finally:
        graph.shutdown()
    assert len(encoded) == 2 and pred.n == N and last.n == N // 3
    encoded.append(parts.part(InferenceResult(model, last)))
    np.testing.assert_allclose(pred.weights, whole.weights, rtol=1e-9, atol=1e-12)
    assert pred.seconds > 0 and model.cache[ROW_SECONDS] == pytest.approx(pred.seconds / N)
    joined = parts.join(model, encoded)
    at_once = native.encode(InferenceResult(model, whole), opts, "rid-1")
    assert orjson.loads(joined).keys() == orjson.loads(at_once).keys()
    _close(_answers(joined), _answers(at_once))


def test_joined_keeps_the_rows_in_order() -> None:
    parts = [
        Prediction(np.full((k, 2), float(i)), np.zeros((k, 4)), 0.5, proba=np.ones((k, 2)))
        for i, k in enumerate((3, 1, 2))
    ]
    joined = Prediction.joined(parts)
    assert joined.weights[:, 0].tolist() == [0, 0, 0, 1, 2, 2]
    assert joined.seconds == 1.5 and joined.mean is None and joined.proba is not None


def test_a_large_request_in_parts_is_answered_recorded_and_refused_as_a_whole(
    bundles: Bundles, tmp_path: Path
) -> None:
    rows = _rows(bundles)
    with UvicornHarness(make_settings(bundles.store, tmp_path, "demo")) as app:
        model = app.service.runtime.require()
        assert ROW_SECONDS not in model.cache  # the first large request runs off the loop
        r = app.post("/predict", json={"instances": rows}, headers={"X-Request-ID": "big-1"})
        assert r.status_code == 200, r.text
        want = native.encode(
            InferenceResult(model, model.predictor.predict(native.decode(
                {"instances": rows}, model, 10_000)[0].columns)), OPTIONS, "big-1"
        )  # fmt: skip
        _close(_answers(r.content), _answers(want))
        records = app.get("/weights", params={"limit": 1}).json()["records"]
        assert records[0]["request_id"] == "big-1" and records[0]["n_instances"] == N
        _close(records[0]["predictions"], _answers(want), atol=1e-6)  # stored as float32
        # A row the circle experts cannot take, in the last part: named by its place.
        model.cache.pop(ROW_SECONDS)
        bad = [*rows[:-1], {"x1": None, "x2": 0.25}]
        r = app.post("/predict", json={"instances": bad}, headers={"X-Request-ID": "big-2"})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert (err["code"], err["field"]) == ("non_finite_output", f"instances[{N - 1}]")
        ids = [
            rec["request_id"] for rec in app.get("/weights", params={"limit": 5}).json()["records"]
        ]
        assert "big-2" not in ids
