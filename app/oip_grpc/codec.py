"""``ModelInferRequest`` to the REST codec's request object, and an outcome to a response.

The request becomes the very dict :func:`app.codecs.oip.decode` reads from JSON, with each
input's data either its ``raw_input_contents`` entry (:class:`app.codecs.tensors.Raw`) or
its typed ``contents``; so gRPC and REST validate alike and fail with the same messages.
The response carries every output in ``raw_output_contents``, as Triton answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from app.codecs import oip, oip_answer
from app.codecs.tensors import Raw, bad, texts, to_raw
from app.core.plane import InferenceResult
from app.core.runtime import LoadedModel
from app.oip_grpc.stubs import pb

# Which typed contents field holds each datatype, and as what numpy type.
CONTENTS: dict[str, tuple[str, Any]] = {
    "FP32": ("fp32_contents", np.float32),
    "FP64": ("fp64_contents", np.float64),
    "INT8": ("int_contents", np.int32),
    "INT16": ("int_contents", np.int32),
    "INT32": ("int_contents", np.int32),
    "INT64": ("int64_contents", np.int64),
    "UINT8": ("uint_contents", np.uint32),
    "UINT16": ("uint_contents", np.uint32),
    "UINT32": ("uint_contents", np.uint32),
    "UINT64": ("uint64_contents", np.uint64),
}


def request_body(req: Any) -> dict[str, Any]:
    """A ``ModelInferRequest`` as the inference request object of the REST protocol."""
    raw = req.raw_input_contents
    if raw and len(raw) != len(req.inputs):
        raise bad(
            "raw_input_contents",
            f"holds {len(raw)} entries but the request has {len(req.inputs)} inputs",
        )
    inputs = []
    for k, t in enumerate(req.inputs):
        if raw:
            if t.HasField("contents"):
                raise bad(
                    f"inputs[{k}].contents",
                    f"tensor {t.name!r}: raw_input_contents is given, so contents must be empty",
                )
            data: Any = Raw(raw[k])
        else:
            data = _contents(t, f"inputs[{k}].contents")
        shape = list(t.shape)
        inputs.append({"name": t.name, "datatype": t.datatype, "shape": shape, "data": data})
    body: dict[str, Any] = {"inputs": inputs}
    if req.id:
        body["id"] = req.id
    if req.outputs:
        body["outputs"] = [{"name": o.name} for o in req.outputs]
    return body


def _contents(t: Any, field: str) -> Any:
    if t.datatype == "BYTES":
        return texts(list(t.contents.bytes_contents), f"{field}.bytes_contents", t.name)
    if t.datatype not in CONTENTS:
        return None  # decode() refuses the datatype, naming the feature
    attr, dtype = CONTENTS[t.datatype]
    values = getattr(t.contents, attr)
    return np.fromiter(values, dtype=dtype, count=len(values))


def set_param(param: Any, value: Any) -> None:
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    elif isinstance(value, str):
        param.string_param = value
    else:  # lists (classes, experts, components) travel as JSON text
        param.string_param = orjson.dumps(value).decode()


def response(result: InferenceResult, requested: oip.Requested, request_id: str) -> Any:
    model = result.model
    resp = pb.ModelInferResponse(
        model_name=model.name,
        model_version=model.version,
        id=requested.id if requested.id is not None else request_id,
    )
    params = {"request_id": request_id, "task": model.task, "experts": list(model.experts)}
    for key, value in params.items():
        set_param(resp.parameters[key], value)
    for t in oip_answer.output_tensors(result, requested.outputs):
        out = resp.outputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        for key, value in t.get("parameters", {}).items():
            set_param(out.parameters[key], value)
        resp.raw_output_contents.append(to_raw(t["datatype"], t["data"]))
    return resp


def metadata(model: LoadedModel) -> Any:
    meta = oip.metadata(model)
    return pb.ModelMetadataResponse(
        name=meta["name"],
        versions=meta["versions"],
        platform=meta["platform"],
        inputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in meta["inputs"]],
        outputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in meta["outputs"]],
    )
