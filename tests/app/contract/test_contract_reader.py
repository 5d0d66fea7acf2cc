"""The contract read back from JSON, and its schemas without a bundle: what the client and
the OpenAPI document rely on, checked on the types themselves."""

from __future__ import annotations

import pytest

from app.contract.answers import ClassPrediction, PredictResult, RecordPage
from app.contract.reader import Unreadable, read
from app.contract.request import BODY_KEYS, DEFAULTS, FORMATS, PARTS
from app.contract.schema import Components

ROW = {
    "prediction": {"label": "good", "probabilities": {"bad": 0.25, "good": 0.75}},
    "weights": {"linear": 0.4, "tree": 0.6},
    "uncertainty": {"total": 0.5, "aleatoric": 0.4, "epistemic": 0.1, "selection": 0.9},
}
ANSWER = {"model": "m", "version": "v1", "request_id": "r-1", "task": "classification",
          "predictions": [ROW]}  # fmt: skip


def test_an_answer_reads_into_the_types_and_left_out_parts_are_none() -> None:
    got = read(PredictResult, {**ANSWER, "added_by_a_newer_server": 1})
    row = got.predictions[0]
    assert row.prediction == ClassPrediction("good", {"bad": 0.25, "good": 0.75})
    assert row.experts is None and row.top_expert == "tree"
    assert got.request_ids == ()  # not on the wire


def test_a_missing_field_is_named_with_its_path() -> None:
    page = {"model": "m", "filter": {}, "records": [{"request_id": "x"}], "next_cursor": None,
            "aggregate": {"records": 0, "instances": 0, "experts": {}}}  # fmt: skip
    with pytest.raises(Unreadable, match=r"a page\.records: lacks 'time'"):
        read(RecordPage, page, "a page")


def test_the_request_description_drives_the_parser_constants() -> None:
    assert BODY_KEYS == ("instances", "format", "include")
    assert FORMATS == ("rows", "columnar") and DEFAULTS["format"] == "rows"
    assert DEFAULTS["include"] == PARTS == ("prediction", "weights", "experts", "uncertainty")


def test_without_a_bundle_the_schemas_stay_generic() -> None:
    comps = Components(None)
    comps.of(PredictResult)
    row = comps.schemas["InstanceResult"]
    assert "required" not in row and row["minProperties"] == 1  # parts may be left out
    assert row["properties"]["weights"]["additionalProperties"] == {"type": "number"}
    assert len(row["properties"]["prediction"]["anyOf"]) == 2  # either task
