"""An outcome as Open Inference Protocol output tensors, and the REST answer's bytes.

Outputs asked for as binary data (the binary tensor data extension) leave the JSON and
follow it as raw bytes, in the order of the outputs; gRPC takes every tensor raw
(:mod:`app.oip_grpc.codec`).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.bundle.digits import written
from app.bundle.mixture import INTERVAL
from app.codecs.oip import Requested, output_names, prediction_type
from app.codecs.tensors import to_raw
from app.contract.answers import UNCERTAINTY
from app.core.plane import InferenceResult


def _tensor(name: str, datatype: str, arr: Any, shape: list[int], **params: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape, "data": arr}
    if params:
        out["parameters"] = params
    return out


def output_tensors(result: InferenceResult, requested: list[str] | None) -> list[dict[str, Any]]:
    """The answer as named tensors; numpy arrays stay arrays for orjson to write."""
    model, served = result.model, result.prediction
    p = written(served)
    n, m = p.n, len(model.experts)
    wanted = requested or list(output_names(model))
    tensors: dict[str, dict[str, Any]] = {}
    if "prediction" in wanted:
        if p.proba is not None:
            labels = model.label_values(served.label_index)
            tensors["prediction"] = _tensor("prediction", prediction_type(model), labels, [n])
        else:
            tensors["prediction"] = _tensor("prediction", "FP64", p.mean, [n])
    if "probabilities" in wanted and p.proba is not None:
        tensors["probabilities"] = _tensor(
            "probabilities", "FP64", p.proba.ravel(), [n, len(model.classes)],
            classes=list(model.class_keys),
        )  # fmt: skip
    if "std" in wanted and p.std is not None:
        tensors["std"] = _tensor("std", "FP64", p.std, [n])
    if "interval" in wanted and p.interval is not None:
        tensors["interval"] = _tensor(
            "interval", "FP64", p.interval.ravel(), [n, 2], level=INTERVAL
        )
    if "weights" in wanted:
        tensors["weights"] = _tensor(
            "weights", "FP64", p.weights.ravel(), [n, m], experts=list(model.experts)
        )
    if "uncertainty" in wanted:
        tensors["uncertainty"] = _tensor(
            "uncertainty", "FP64", p.uncertainty.ravel(), [n, len(UNCERTAINTY)],
            components=list(UNCERTAINTY),
        )  # fmt: skip
    return [tensors[name] for name in wanted]


def encode(result: InferenceResult, requested: Requested, request_id: str) -> tuple[bytes, int]:
    """The response body, and how long its JSON part is: the whole body unless outputs were
    asked for as binary data, which then follows the JSON in the order of the outputs."""
    model = result.model
    tensors = output_tensors(result, requested.outputs)
    raws = []
    for t in tensors:
        if t["name"] in requested.binary:
            raw = to_raw(t["datatype"], t.pop("data"))
            t["parameters"] = {**t.get("parameters", {}), "binary_data_size": len(raw)}
            raws.append(raw)
    header = orjson.dumps(
        {
            "model_name": model.name,
            "model_version": model.version,
            "id": requested.id if requested.id is not None else request_id,
            "parameters": {
                "request_id": request_id,
                "task": model.task,
                "experts": list(model.experts),
            },
            "outputs": tensors,
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    return (header + b"".join(raws) if raws else header), len(header)
