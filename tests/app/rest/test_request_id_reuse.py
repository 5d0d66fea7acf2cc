"""A request id names one audited prediction of a model: a second prediction under it is
refused with 409 on ``/predict`` and OIP infer, also when both arrive at once; another
model may use the same id. The first record stays, and answers ``GET /weights``."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, harness
from tests.support.trail import Trail

Client = AsgiHarness | UvicornHarness
ROW = {"x1": 0.5, "x2": -1.0}


def infer_body(x1: float) -> dict[str, Any]:
    tensors = [("x1", x1), ("x2", -1.0)]
    return {
        "inputs": [{"name": n, "datatype": "FP64", "shape": [1], "data": [v]} for n, v in tensors]
    }


@pytest.mark.parametrize("kind", ["asgi", "uvicorn"])
def test_a_second_prediction_under_an_id_is_refused_and_the_first_stays(
    kind: str, bundles: Bundles, tmp_path: Path
) -> None:
    with harness(kind, make_settings(bundles.store, tmp_path, "demo")) as h:
        first = h.post("/predict", json={"instances": [ROW]}, headers={"X-Request-ID": "once"})
        assert first.status_code == 200, first.text
        again = h.post(
            "/predict",
            json={"instances": [{"x1": 2.0, "x2": 0.0}]},
            headers={"X-Request-ID": "once"},
        )
        assert again.status_code == 409, again.text
        assert again.headers["x-request-id"] == "once"
        error = again.json()["error"]
        assert (error["code"], error["field"]) == ("duplicate_request_id", "header X-Request-ID")
        assert (
            "request id 'once' already names an audited prediction of model 'demo'"
            in (error["message"])
        )
        # Another route of the same model: the id is taken there too.
        oip = h.post(
            "/v2/models/demo/infer", json=infer_body(2.0), headers={"X-Request-ID": "once"}
        )
        assert oip.status_code == 409, oip.text
        assert set(oip.json()) == {"error"} and "already names" in oip.json()["error"]
        record = h.get("/weights", params={"request_id": "once"}).json()
        assert record["route"] == "predict"
        weights = first.json()["predictions"][0]["weights"]
        assert record["predictions"][0]["weights"] == pytest.approx(weights, abs=1e-6)
        # The server's own ids never collide; a new id of the client's is taken at once.
        assert h.post("/predict", json={"instances": [ROW]}).status_code == 200
        assert (
            h.post(
                "/predict", json={"instances": [ROW]}, headers={"X-Request-ID": "twice"}
            ).status_code
            == 200
        )
    trail = Trail(f"sqlite:///{tmp_path / 'audit.db'}", tmp_path / "audit.db")
    assert Counter(trail.request_ids())["once"] == 1 and trail.count() == 3


def test_predictions_under_one_id_at_once_leave_one_record(
    bundles: Bundles, tmp_path: Path
) -> None:
    """Sent together, most land in one group commit: the first queued keeps the id."""
    n = 16

    async def burst(base: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            sent = [
                client.post(
                    "/predict",
                    json={"instances": [{"x1": k / n, "x2": 0.0}]},
                    headers={"X-Request-ID": f"burst-{round}"},
                )
                for k in range(n)
                for round in range(3)
            ]
            return [r.status_code for r in await asyncio.gather(*sent)]

    with UvicornHarness(make_settings(bundles.store, tmp_path, "demo")) as h:
        statuses = asyncio.run(burst(h.base_url))
    assert Counter(statuses) == {200: 3, 409: 3 * n - 3}
    trail = Trail(f"sqlite:///{tmp_path / 'audit.db'}", tmp_path / "audit.db")
    assert sorted(trail.request_ids()) == ["burst-0", "burst-1", "burst-2"]


def test_each_model_has_its_own_ids_in_a_shared_trail(
    bundles: Bundles, tmp_path: Path, pg_url: str
) -> None:
    """Two services on one PostgreSQL trail, a gateway passing one id to both."""
    demo = make_settings(bundles.store, tmp_path / "a", "demo", audit_url=pg_url)
    credit = make_settings(bundles.store, tmp_path / "b", "credit", audit_url=pg_url)
    rows = bundles.credit.instances(slice(0, 1))
    with AsgiHarness(demo) as a, AsgiHarness(credit) as b:
        headers = {"X-Request-ID": "fan-out"}
        assert a.post("/predict", json={"instances": [ROW]}, headers=headers).status_code == 200
        assert b.post("/predict", json={"instances": rows}, headers=headers).status_code == 200
        again = b.post("/predict", json={"instances": rows}, headers=headers)
        assert again.status_code == 409 and "model 'credit'" in again.text
    assert Trail(pg_url, None).request_ids() == ["fan-out", "fan-out"]
