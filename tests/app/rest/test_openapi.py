"""``/openapi.json`` is typed by the served bundle, and real answers match it.

The ``odd`` bundle's features are named with hyphens, spaces, unicode, a leading digit,
URL-reserved characters, and the words ``instances`` and ``limit``; the document must
carry each under exactly that name, with its type, its categories and ``null``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.core.inputs import FLOAT32_MAX
from app.rest.openapi import ERRORS
from tests.support.bundles import Trained, make_settings
from tests.support.harness import AsgiHarness

TOKEN = "s3cret-token"


def validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    root = {"components": doc["components"], "$ref": f"#/components/schemas/{name}"}
    return jsonschema.Draft202012Validator(root)


def operation_schema(doc: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return doc["paths"][path][method]


@pytest.fixture(scope="module")
def odd(odd_bundle: tuple[Path, Trained], tmp_path_factory: pytest.TempPathFactory) -> Any:
    store, _ = odd_bundle
    settings = make_settings(store, tmp_path_factory.mktemp("audit"), "odd", audit_payload="full")
    with AsgiHarness(settings) as app:
        yield app


@pytest.fixture(scope="module")
def doc(odd: AsgiHarness) -> dict[str, Any]:
    r = odd.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def test_instance_has_every_feature_by_the_users_name(
    doc: dict[str, Any], odd: AsgiHarness
) -> None:
    manifest = odd.service.runtime.require().manifest
    instance = doc["components"]["schemas"]["Instance"]
    names = [f.name for f in manifest.features]
    assert list(instance["properties"]) == names
    assert "crédit_历史" in names and "2nd purpose" in names and "rate%/day & more?" in names
    assert instance["required"] == names  # the route refuses a row without any of them
    assert instance["additionalProperties"] is False  # and one with another key
    for f in manifest.features:
        prop = instance["properties"][f.name]
        if f.dtype == "float":
            assert prop["type"] == ["number", "null"]
            assert prop["minimum"] == -FLOAT32_MAX and prop["maximum"] == FLOAT32_MAX
            assert "enum" not in prop
        else:
            assert prop["type"] == ["string", "null"]
            assert prop["enum"] == [*(f.categories or []), None]
    request = doc["components"]["schemas"]["PredictRequest"]
    assert request["properties"]["instances"]["items"] == {"$ref": "#/components/schemas/Instance"}
    assert request["properties"]["instances"]["maxItems"] == odd.service.settings.max_batch_rows
    assert doc["info"]["x-bundle"] == {"name": "odd", "version": manifest.version}


def test_answers_name_experts_and_classes(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    row = schemas["InstanceResult"]["properties"]
    assert row["weights"]["required"] == ["linear", "tree"]
    assert row["experts"]["required"] == ["linear", "tree"]
    assert row["prediction"] == {"$ref": "#/components/schemas/ClassPrediction"}
    assert schemas["ClassPrediction"]["properties"]["label"] == {"enum": ["bad", "good"]}
    assert schemas["ClassPrediction"]["properties"]["probabilities"]["required"] == ["bad", "good"]
    assert set(schemas["Uncertainty"]["required"]) == {
        "total", "aleatoric", "epistemic", "selection",
    }  # fmt: skip
    assert "RegressionPrediction" not in schemas  # only the bundle's task
    ok = operation_schema(doc, "/predict", "post")["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["anyOf"] == [
        {"$ref": "#/components/schemas/PredictResult"},
        {"$ref": "#/components/schemas/PredictColumnarAnswer"},
    ]
    infer = schemas["InferenceRequest"]["properties"]["inputs"]["items"]["anyOf"]
    assert [t["properties"]["name"]["const"] for t in infer] == list(
        schemas["Instance"]["properties"]
    )


def test_weights_takes_every_feature_as_a_query_parameter(doc: dict[str, Any]) -> None:
    params = {p["name"]: p for p in operation_schema(doc, "/weights", "get")["parameters"]}
    instance = doc["components"]["schemas"]["Instance"]["properties"]
    for name in instance:
        assert name in params and params[name]["in"] == "query"
        assert not params[name]["required"]
    # No null in a query string: an empty value is the missing value.
    assert params["duration in months"]["schema"]["type"] == "number"
    assert None not in params["checking-status"]["schema"]["enum"]
    # "limit" is a feature of this bundle and the listing's page size: one parameter, both.
    assert [s.get("type") for s in params["limit"]["schema"]["anyOf"]] == ["integer", "string"]
    assert params["expert"]["schema"] == {"enum": ["linear", "tree"]}


def test_feedback_and_performance_are_typed_by_the_bundle(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    body = operation_schema(doc, "/feedback", "post")["requestBody"]["content"]
    assert body["application/json"]["schema"] == {"$ref": "#/components/schemas/FeedbackRequest"}
    outcome = schemas["OutcomeItem"]["properties"]["outcome"]
    assert outcome["enum"] == ["bad", "good"]  # the classes (as text too: they are text)
    assert schemas["OutcomeItem"]["required"] == ["request_id", "outcome"]
    example = next(iter(body["application/json"]["examples"].values()))["value"]
    validator(doc, "FeedbackRequest").validate(example)
    assert schemas["FeedbackRequest"]["properties"]["outcomes"]["maxItems"] == 1000
    report = schemas["Performance"]["properties"]
    assert report["mixture"] == {"$ref": "#/components/schemas/ClassScores"}
    assert "RegressionScores" not in schemas
    params = operation_schema(doc, "/performance", "get")["parameters"]
    assert [p["name"] for p in params][:3] == ["since", "until", "version"]


def test_every_operation_declares_the_errors_it_answers(doc: dict[str, Any]) -> None:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            declared = {int(s) for s in op["responses"]} - {200}
            assert declared == set(ERRORS.get((path, method), (400,))), (method, path)
            for status, response in op["responses"].items():
                assert "X-Request-ID" in response["headers"], (method, path, status)
                if status != "200" and path not in ("/readyz", "/v2/health/ready"):
                    schema = json.dumps(response["content"]["application/json"]["schema"])
                    assert ("OipError" if path.startswith("/v2") else "ErrorBody") in schema
    components = doc["components"]["schemas"]
    assert "HTTPValidationError" not in components  # FastAPI's 422 shape is never sent


def test_real_answers_match_the_document(
    doc: dict[str, Any], odd_bundle: tuple[Path, Trained], tmp_path: Path
) -> None:
    # Every shape the document describes, from one real request each.
    store, trained = odd_bundle
    rows = trained.instances(slice(0, 3))
    settings = make_settings(store, tmp_path, "odd", audit_payload="full")
    with AsgiHarness(settings) as app:
        numeric = app.service.runtime.require().features.numeric
        rows_answer = app.post(
            "/predict", json={"instances": rows}, headers={"X-Request-ID": "odd-1"}
        )
        columnar = app.post("/predict", json={"instances": rows, "format": "columnar"})
        partial = app.post(
            "/predict",
            json={"instances": rows, "format": "columnar", "include": ["weights", "experts"]},
        )
        probe = app.get("/weights", params={k: "" if v is None else v for k, v in rows[0].items()})
        record = app.get("/weights", params={"request_id": "odd-1"})
        page = app.get("/weights", params={"limit": "5"})
        models = app.get("/models")
        infer = app.post(
            "/v2/models/odd/infer",
            json={
                "inputs": [
                    {
                        "name": name,
                        "datatype": "FP64" if name in numeric else "BYTES",
                        "shape": [len(rows)],
                        "data": [row[name] for row in rows],
                    }
                    for name in rows[0]
                ]
            },
        )
    for r, name in [
        (rows_answer, "PredictResult"),
        (columnar, "PredictColumnarAnswer"),
        (partial, "PredictColumnarAnswer"),
        (probe, "GateWeights"),
        (record, "AuditRecord"),
        (page, "RecordPage"),
        (infer, "InferenceResponse"),
        (models, "ModelsAnswer"),
    ]:
        assert r.status_code == 200, (name, r.text)
        validator(doc, name).validate(r.json())
    assert page.json()["records"], "the page should hold the records just written"


def test_unknown_category_as_missing_takes_any_text(
    odd_bundle: tuple[Path, Trained], tmp_path: Path
) -> None:
    store, _ = odd_bundle
    settings = make_settings(store, tmp_path, "odd", unknown_category="missing")
    with AsgiHarness(settings) as app:
        prop = app.get("/openapi.json").json()["components"]["schemas"]["Instance"]
    purpose = prop["properties"]["2nd purpose"]
    assert purpose["type"] == ["string", "null"] and "enum" not in purpose


def test_the_document_follows_a_reload(odd_bundle: tuple[Path, Trained], tmp_path: Path) -> None:
    # A new version whose manifest names a feature differently (same graph inputs).
    source, _ = odd_bundle
    store = tmp_path / "store"
    shutil.copytree(source, store)
    old = (store / "odd" / "LATEST").read_text().strip()
    new = "v2-renamed"
    shutil.copytree(store / "odd" / old, store / "odd" / new)
    manifest_path = store / "odd" / new / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["version"] = new
    for f in manifest["features"]:
        if f["name"] == "limit":
            f["name"] = "savings status"
    manifest_path.write_text(json.dumps(manifest))
    settings = make_settings(store, tmp_path, "odd", admin_token=TOKEN)
    with AsgiHarness(settings) as app:
        before = app.get("/openapi.json").json()
        (store / "odd" / "LATEST").write_text(new)
        reloaded = app.post("/admin/reload", headers={"Authorization": f"Bearer {TOKEN}"})
        assert reloaded.status_code == 200, reloaded.text
        after = app.get("/openapi.json").json()
    assert before["info"]["x-bundle"]["version"] == old
    assert after["info"]["x-bundle"]["version"] == new
    props = after["components"]["schemas"]["Instance"]["properties"]
    assert "savings status" in props and "limit" not in props
    assert "limit" in before["components"]["schemas"]["Instance"]["properties"]


def oip_body(app: AsgiHarness, rows: list[dict[str, Any]]) -> dict[str, Any]:
    numeric = app.service.runtime.require().features.numeric
    return {
        "inputs": [
            {"name": name, "datatype": "FP64" if name in numeric else "BYTES",
             "shape": [len(rows)], "data": [row[name] for row in rows]}
            for name in rows[0]
        ]
    }  # fmt: skip


def test_regression_answers_match_their_document(
    odd_regression: tuple[Path, Trained], tmp_path: Path
) -> None:
    store, trained = odd_regression
    rows = trained.instances(slice(0, 3))
    with AsgiHarness(make_settings(store, tmp_path, "oddreg")) as app:
        doc = app.get("/openapi.json").json()
        answers = {
            "PredictResult": app.post("/predict", json={"instances": rows}),
            "PredictColumnarAnswer": app.post(
                "/predict", json={"instances": rows, "format": "columnar"}
            ),
            "InferenceResponse": app.post("/v2/models/oddreg/infer", json=oip_body(app, rows)),
            "ModelsAnswer": app.get("/models"),
        }
    interval = doc["components"]["schemas"]["Interval"]
    assert interval["properties"]["level"] == {"const": 0.9}
    assert "ClassPrediction" not in doc["components"]["schemas"]
    columns = doc["components"]["schemas"]["ColumnarPredictions"]["properties"]
    assert "label" not in columns and {"mean", "std", "interval"} <= set(columns)
    for name, r in answers.items():
        assert r.status_code == 200, r.text
        validator(doc, name).validate(r.json())


def test_keyed_routes_declare_401_and_403_only_when_keys_are_set(
    odd_bundle: tuple[Path, Trained], tmp_path: Path
) -> None:
    store, _ = odd_bundle
    settings = make_settings(store, tmp_path, "odd", api_keys="k-data", auditor_keys="k-audit")
    with AsgiHarness(settings) as app:
        keyed = app.get("/openapi.json").json()["paths"]
    for path, method in (("/predict", "post"), ("/weights", "get"), ("/models", "get"),
                         ("/v2/models/{name}/infer", "post")):  # fmt: skip
        declared = {int(s) for s in keyed[path][method]["responses"]}
        assert {401, 403} <= declared, path
    for path in ("/livez", "/readyz", "/v2/models/{name}/ready"):
        assert not {"401", "403"} & set(keyed[path]["get"]["responses"]), path
    assert "401" not in keyed["/metrics"]["get"]["responses"]  # no metrics keys here
