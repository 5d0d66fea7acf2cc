"""The OpenAPI schemas of one served bundle, from the contract and the bundle's features.

The request and answer types, the columnar and OIP answers among them, come from
:mod:`app.contract`, named for this bundle (its experts, classes, outputs, task and row
limit). What only the bundle knows is made here: each feature under the client's own name
(any text), required as :class:`~app.core.inputs.FeatureTable` enforces it and nullable
where the bundle answers a missing value (:mod:`app.core.nullable`), numbers bounded by
float32 like the graphs, categories as an enum wherever an unseen one is refused; and the
Open Inference Protocol's input tensors.
"""

from __future__ import annotations

from typing import Any

from app.bundle.mixture import INTERVAL
from app.codecs.oip import NUMERIC_TYPES, output_names
from app.contract.answers import (
    AuditRecord,
    ErrorBody,
    GateWeights,
    OipError,
    PredictResult,
    RecordPage,
    Reloaded,
)
from app.contract.columns import InferenceResponse, PredictColumnarAnswer
from app.contract.drift import DriftReport
from app.contract.feedback import FeedbackRequest, FeedbackResult
from app.contract.models import ModelsAnswer
from app.contract.performance import Performance
from app.contract.request import PredictRequest
from app.contract.schema import Components, Schema, Vocabulary
from app.core.inputs import FLOAT32_MAX
from app.core.nullable import nullable_features, valid_row
from app.core.runtime import LoadedModel

STRING: Schema = {"type": "string"}
OPTIONAL_OBJECT: Schema = {"type": ["object", "null"]}
# The answer of each route, as the contract describes it.
ANSWERS: dict[str, tuple[type, ...]] = {
    "/predict": (PredictResult, PredictColumnarAnswer),
    "/weights": (AuditRecord, GateWeights, RecordPage),
    "/admin/reload": (Reloaded,),
    "/feedback": (FeedbackResult,),
    "/performance": (Performance,),
    "/drift": (DriftReport,),
    "/v2/models/{name}/infer": (InferenceResponse,),
    "/models": (ModelsAnswer,),
}


def components(model: LoadedModel | None, max_rows: int) -> tuple[dict[str, Schema], Components]:
    """Every schema of the document: the contract's, named for ``model`` when one is
    loaded, and the bundle's own (features, columnar answer, OIP tensors)."""
    vocabulary = None
    if model is not None:
        vocabulary = Vocabulary(
            name=model.name,
            task=model.task,
            experts=tuple(model.experts),
            classes=tuple(model.classes),
            class_keys=tuple(model.class_keys),
            interval=INTERVAL,
            max_rows=max_rows,
            outputs=output_names(model),
            per_row_sds=model.task == "regression" and model.per_row_sds,
        )
    comps = Components(vocabulary)
    described: list[type] = [PredictRequest, FeedbackRequest, ErrorBody, OipError]
    for answers in ANSWERS.values():
        described += answers
    for cls in described:
        comps.of(cls)
    schemas = dict(comps.schemas)
    if model is not None:
        schemas["Instance"] = instance(model)
        schemas["InferenceRequest"] = oip_request(model, max_rows)
    return schemas, comps


def _object(properties: dict[str, Schema], required: bool = True, **extra: Any) -> Schema:
    out: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = list(properties)
    return {**out, **extra}


def _array(items: Schema, size: int | None = None, **extra: Any) -> Schema:
    out: Schema = {"type": "array", "items": items}
    if size is not None:
        out["minItems"] = out["maxItems"] = size
    return {**out, **extra}


def _const(value: Any) -> Schema:
    return {"const": value}


# -- requests ----------------------------------------------------------------------------------
def category_values(model: LoadedModel, name: str) -> list[str] | None:
    """The categories as an enum, or None when any string is taken (capped column, or
    ``IABMA_UNKNOWN_CATEGORY=missing``): an enum must not forbid what the server accepts."""
    table = model.features
    cats = table.categories[name]
    if cats.other or table.map_unknown_to_missing:
        return None
    return list(cats.categories)


def feature_value(model: LoadedModel, name: str, in_query: bool = False) -> Schema:
    """One feature's value: a float32-range number or a category; missing is ``null`` in a
    JSON body, and an empty value in a query string (where there is no ``null``). A body's
    ``null`` is offered only where the bundle answers it (:func:`nullable_features`)."""
    table = model.features
    nullable = not in_query and name in nullable_features(model)
    missing = "an empty value for a missing value" if in_query else "null for a missing value"
    if not in_query and not nullable:
        missing = "never null: an expert gives no finite answer without it"
    if name in table.numeric:
        kind = "number"
        out: Schema = {"minimum": -FLOAT32_MAX, "maximum": FLOAT32_MAX}
        what = f"A number (numeric text is read too); {missing}."
    else:
        kind = "string"
        cats = category_values(model, name)
        shown = table.categories[name].shown()
        out = {} if cats is None else {"enum": [*cats, None] if nullable else cats}
        what = (
            f"A category among {shown}; {missing}."
            if cats is not None
            else f"Text; known categories {shown}, any other is read as missing or other."
        )
    return {"type": [kind, "null"] if nullable else kind, **out, "description": what}


def instance(model: LoadedModel) -> Schema:
    """One row: every feature under the client's name, required, nothing else."""
    names = model.features.names
    return _object(
        {name: feature_value(model, name) for name in names},
        description="Every feature of the model, by the name in the training data; "
        "null for a missing value where the feature's schema takes it.",
    )


def oip_example(model: LoadedModel) -> dict[str, Any]:
    numeric = model.features.numeric
    tensors = [
        {"name": name, "datatype": "FP64" if name in numeric else "BYTES", "shape": [1, 1],
         "data": [value]}
        for name, value in valid_row(model).items()
    ]  # fmt: skip
    return {"inputs": tensors}


def _contains_tensor(name: str) -> Schema:
    return {"contains": {"required": ["name"], "properties": {"name": _const(name)}}}


def input_tensor(model: LoadedModel, name: str, max_rows: int) -> Schema:
    """One feature's tensor, ``[n]`` or ``[n, 1]``, numeric or ``BYTES``."""
    value = feature_value(model, name)
    numeric = name in model.features.numeric
    rows = {"type": "integer", "minimum": 1, "maximum": max_rows}
    return {
        "type": "object",
        "required": ["name", "datatype", "shape", "data"],
        "properties": {
            "name": _const(name),
            "datatype": {"enum": sorted(NUMERIC_TYPES)} if numeric else _const("BYTES"),
            "shape": {"type": "array", "prefixItems": [rows, _const(1)], "minItems": 1,
                      "maxItems": 2},
            "data": _array({"anyOf": [value, _array(value, 1)]}, minItems=1),
            "parameters": OPTIONAL_OBJECT,
        },
    }  # fmt: skip


def oip_request(model: LoadedModel, max_rows: int) -> Schema:
    """An OIP v2 inference request: one tensor per feature, each once."""
    names = model.features.names
    wanted = {"type": "object", "required": ["name"],
              "properties": {"name": {"enum": list(output_names(model))},
                             "parameters": OPTIONAL_OBJECT}}  # fmt: skip
    return {
        "type": "object",
        "required": ["inputs"],
        "additionalProperties": False,
        "properties": {
            # The server reads null as absent, here and in every tensor's parameters.
            "id": {"type": ["string", "null"]},
            "parameters": OPTIONAL_OBJECT,
            # Every feature's tensor, each once: the server refuses a request without one.
            "inputs": _array(
                {"anyOf": [input_tensor(model, name, max_rows) for name in names]},
                minItems=len(names),
                maxItems=len(names),
                allOf=[_contains_tensor(name) for name in names],
            ),
            "outputs": {"anyOf": [_array(wanted), {"type": "null"}]},
        },
        "description": "Every feature as one tensor named as in the training data, each "
        "once; all tensors have the same number of rows.",
    }
