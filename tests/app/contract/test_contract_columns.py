"""The columnar, OIP and /models answers are described once, in ``app.contract``: the
schema of each task keeps only its own parts, sized by the bundle, and the reader refuses
an answer that is not what the contract says."""

from __future__ import annotations

import dataclasses
from typing import Any

import jsonschema
import pytest

from app.contract.answers import UNCERTAINTY
from app.contract.columns import (
    UNCERTAINTY_COLUMNS,
    ColumnarPredictions,
    InferenceResponse,
    PredictColumnarAnswer,
)
from app.contract.models import ModelsAnswer
from app.contract.reader import Unreadable, read
from app.contract.schema import Components, Vocabulary

CLASSIFICATION = Vocabulary(
    name="m", task="classification", experts=("a", "b", "c"), classes=(0, 1),
    class_keys=("0", "1"), interval=0.9, max_rows=10, outputs=("prediction", "weights"),
)  # fmt: skip
REGRESSION = Vocabulary(
    name="r", task="regression", experts=("a", "b"), classes=(), class_keys=(),
    interval=0.9, max_rows=10, outputs=("prediction", "std"),
)  # fmt: skip
ANSWER_C: dict[str, Any] = {
    "model": "m", "version": "1", "request_id": "x", "task": "classification",
    "format": "columnar", "experts": ["a", "b", "c"], "classes": [0, 1],
    "predictions": {
        "label": [1, 0],
        "probabilities": [[0.2, 0.8], [0.6, 0.4]],
        "weights": [[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]],
        "experts": {"label": [[1, 1, 0], [0, 0, 0]],
                    "probabilities": [[[0.3, 0.7]] * 3, [[0.9, 0.1]] * 3]},
    },
}  # fmt: skip


def validator(vocabulary: Vocabulary | None, cls: type) -> jsonschema.Draft202012Validator:
    comps = Components(vocabulary)
    root = comps.of(cls)
    return jsonschema.Draft202012Validator({**root, "components": {"schemas": comps.schemas}})


def test_uncertainty_columns_are_the_uncertainty_fields() -> None:
    assert UNCERTAINTY_COLUMNS == UNCERTAINTY


def test_each_task_keeps_its_own_parts_sized_by_the_bundle() -> None:
    validator(CLASSIFICATION, PredictColumnarAnswer).validate(ANSWER_C)
    comps = Components(CLASSIFICATION)
    comps.of(PredictColumnarAnswer)
    parts = comps.schemas["ColumnarPredictions"]["properties"]
    assert set(parts) == {"label", "probabilities", "weights", "experts", "uncertainty"}
    assert parts["label"]["items"] == {"enum": [0, 1]}
    assert parts["weights"]["items"]["maxItems"] == 3
    assert comps.schemas["PredictColumnarAnswer"]["required"][-1] == "classes"
    regression = Components(REGRESSION)
    regression.of(PredictColumnarAnswer)
    parts = regression.schemas["ColumnarPredictions"]["properties"]
    assert set(parts) == {"mean", "std", "interval", "weights", "experts", "uncertainty"}
    assert "classes" not in regression.schemas["PredictColumnarAnswer"]["properties"]
    assert regression.schemas["ExpertColumns"]["required"] == ["mean", "std"]


@pytest.mark.parametrize(
    "broken",
    [
        {"classes": [0, 2]},  # a class the bundle does not have
        {"experts": ["a", "b"]},
        {"predictions": {}},  # include asks for at least one part
        {"predictions": {**ANSWER_C["predictions"], "weights": [[0.5, 0.5]] * 2}},
        {"predictions": {**ANSWER_C["predictions"], "mean": [1.0, 2.0]}},  # regression's
    ],
)
def test_the_schema_refuses_what_the_server_never_sends(broken: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validator(CLASSIFICATION, PredictColumnarAnswer).validate({**ANSWER_C, **broken})


def test_the_reader_keeps_columns_as_sent_and_names_a_bad_one() -> None:
    answer = read(PredictColumnarAnswer, ANSWER_C)
    assert answer.classes == (0, 1) and answer.predictions.n == 2
    assert answer.predictions.weights is ANSWER_C["predictions"]["weights"]
    bad = {**ANSWER_C, "predictions": {"weights": {"a": 1}}}
    with pytest.raises(Unreadable, match=r"\.predictions\.weights: expected an array"):
        read(PredictColumnarAnswer, bad)
    assert read(ColumnarPredictions, {"uncertainty": {k: [0.0] for k in UNCERTAINTY}}).n == 1


def test_oip_and_models_answers_are_typed_by_the_bundle() -> None:
    comps = Components(REGRESSION)
    comps.of(InferenceResponse)
    assert comps.schemas["OutputTensor"]["properties"]["name"] == {"enum": ["prediction", "std"]}
    assert comps.schemas["InferParameters"]["properties"]["experts"] == {"const": ["a", "b"]}
    comps.of(ModelsAnswer)
    # The manifest may gain fields: its sections stay open, the rest closed.
    assert "additionalProperties" not in comps.schemas["ModelsAnswer"]
    assert "additionalProperties" not in comps.schemas["ExpertCard"]
    assert comps.schemas["Rollout"]["additionalProperties"] is False


def test_expert_std_is_per_row_where_the_bundle_serves_per_row_sds() -> None:
    per_expert = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
    for per_row, want in [(False, per_expert), (True, {"type": "array", "items": per_expert})]:
        comps = Components(dataclasses.replace(REGRESSION, per_row_sds=per_row))
        comps.of(PredictColumnarAnswer)
        assert comps.schemas["ExpertColumns"]["properties"]["std"] == want
    generic = Components(None)
    generic.of(PredictColumnarAnswer)
    assert len(generic.schemas["ExpertColumns"]["properties"]["std"]["anyOf"]) == 2  # either
