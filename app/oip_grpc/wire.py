"""``ModelInfer``'s common call in one pass: raw FP32 tensors straight to the graph's
columns, and the answer as protobuf bytes around a head made once per bundle and size.

A call of numeric features in ``raw_input_contents`` (what tritonclient sends), with no
outputs named, skips the REST-shaped dict of :func:`app.oip_grpc.codec.request_body`;
anything else, and anything this path doubts, takes the general path, which alone decides
what is refused and how. The answer's fixed fields (names, datatypes, shapes, the
parameters every call shares) are serialised once; a protobuf message's fields may come
in any order and its map entries merge, so the call's id, request id and raw outputs
follow as bytes of their own.
"""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np

from app.codecs import oip_answer
from app.codecs.oip import Requested, prediction_type, rows_of
from app.codecs.tensors import to_raw
from app.core.plane import InferenceRequest, InferenceResult
from app.core.runtime import LoadedModel
from app.oip_grpc import codec
from app.oip_grpc.stubs import pb

# Heads are cached per number of rows up to this: single rows and small batches.
CACHED_ROWS = 64
_F4 = np.dtype("<f4")
_F8 = np.dtype("<f8")


def fast_request(
    req: Any, model: LoadedModel, max_rows: int
) -> tuple[InferenceRequest, Requested] | None:
    """The call as an inference request, or None for the general path."""
    table = model.features
    raws, inputs = req.raw_input_contents, req.inputs
    if req.outputs or len(inputs) != len(table.names) or len(raws) != len(inputs):
        return None
    if len(table.numeric_names) != len(inputs):
        return None
    data: dict[str, np.ndarray] = {}
    n = -1
    for t, raw in zip(inputs, raws, strict=True):
        name, shape = t.name, t.shape
        if t.datatype != "FP32" or name not in table.numeric or name in data:
            return None
        if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
            return None
        rows = shape[0]
        if rows <= 0 or (n >= 0 and rows != n) or len(raw) != 4 * rows or t.HasField("contents"):
            return None
        n = rows
        data[name] = np.frombuffer(raw, _F4)
    if n > max_rows:
        return None
    columns = table.columns_fast(data)
    if columns is None:
        return None
    request = InferenceRequest(columns, n, lambda: rows_of(data), "oip_grpc", _row_field)
    return request, Requested(None, req.id or None)


def _row_field(i: int) -> str:
    return f"row {i}"


def response_bytes(result: InferenceResult, requested: Requested, request_id: str) -> bytes:
    """The ``ModelInferResponse`` of :func:`app.oip_grpc.codec.response`, serialised."""
    model, n = result.model, result.prediction.n
    if requested.outputs is not None or n > CACHED_ROWS:
        return bytes(codec.response(result, requested, request_id).SerializeToString())
    key = ("grpc_head", n)
    head = model.cache.get(key)
    if head is None:
        head = model.cache[key] = _head(model, oip_answer.output_tensors(result, None))
    tail = pb.ModelInferResponse(
        id=requested.id if requested.id is not None else request_id,
        raw_output_contents=_raw_outputs(result),
    )
    tail.parameters["request_id"].string_param = request_id
    return head + bytes(tail.SerializeToString())


def _raw_outputs(result: InferenceResult) -> list[bytes]:
    """Every output's raw bytes, in :func:`app.codecs.oip.output_names` order: a
    classifier's straight from its arrays (float32 values as FP64, app.bundle.digits)."""
    model, p = result.model, result.prediction
    if p.proba is None:
        return [to_raw(t["datatype"], t["data"]) for t in oip_answer.output_tensors(result, None)]
    labels = model.label_values(p.label_index)
    first = to_raw(prediction_type(model), labels)
    return [first, *(_f32_as_f64(a) for a in (p.proba, p.weights, p.uncertainty))]


def _f32_as_f64(a: np.ndarray) -> bytes:
    return a.astype(_F4).astype(_F8).tobytes()


def _head(model: LoadedModel, tensors: list[dict[str, Any]]) -> bytes:
    """What every answer of this many rows shares: names, parameters, output metadata."""
    resp = pb.ModelInferResponse(model_name=model.name, model_version=model.version)
    codec.set_param(resp.parameters["task"], model.task)
    codec.set_param(resp.parameters["experts"], list(model.experts))
    for t in tensors:
        out = resp.outputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        for key, value in t.get("parameters", {}).items():
            codec.set_param(out.parameters[key], value)
    return bytes(resp.SerializeToString())


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else bytes(message.SerializeToString())


def add_inference_service(servicer: Any, server: grpc.aio.Server) -> None:
    """The generated registration, but ``ModelInfer`` may answer with bytes already
    serialised (:func:`response_bytes`)."""
    names = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata")
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=getattr(pb, f"{name}Request").FromString,
            response_serializer=getattr(pb, f"{name}Response").SerializeToString,
        )
        for name in names
    }
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer,
        request_deserializer=pb.ModelInferRequest.FromString,
        response_serializer=_serialize,
    )
    service = "inference.GRPCInferenceService"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)
