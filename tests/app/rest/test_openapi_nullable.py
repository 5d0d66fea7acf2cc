"""The document offers ``null`` for a feature exactly where ``/predict`` takes it: the
demo's circle experts read raw coordinates without imputation (a missing one is a 422),
the credit experts impute every feature."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.core.nullable import valid_row
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness


@pytest.fixture(scope="module", params=["demo", "credit"])
def served(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AsgiHarness]:
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("n"), request.param)
    with AsgiHarness(settings) as h:
        yield h


def offers_null(schema: dict[str, Any]) -> bool:
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return "null" in kinds and (None in schema["enum"] if "enum" in schema else True)


def test_null_is_offered_where_predict_takes_it(served: AsgiHarness) -> None:
    model = served.service.runtime.require()
    doc = served.get("/openapi.json").json()
    instance = doc["components"]["schemas"]["Instance"]["properties"]
    oip = doc["components"]["schemas"]["InferenceRequest"]["properties"]["inputs"]["items"]
    oip_data = {t["properties"]["name"]["const"]: t["properties"]["data"]["items"]["anyOf"][0]
                for t in oip["anyOf"]}  # fmt: skip
    row, seen = valid_row(model), set()
    for name in model.features.names:
        r = served.post("/predict", json={"instances": [{**row, name: None}]})
        assert r.status_code in (200, 422), r.text
        taken = r.status_code == 200
        if not taken:
            assert r.json()["error"]["code"] == "non_finite_output"
        assert offers_null(instance[name]) is taken, (name, instance[name])
        assert offers_null(oip_data[name]) is taken, name
        seen.add(taken)
    # demo: no feature takes null; credit: every one does.
    assert seen == ({False} if model.name == "demo" else {True})
