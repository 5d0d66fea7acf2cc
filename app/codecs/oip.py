"""Open Inference Protocol (KServe v2) tensors to columns, model metadata, and the outputs
a request asks for; :mod:`app.codecs.oip_answer` writes the output tensors.

One input tensor per feature, ``[n]`` or ``[n, 1]``, numeric or ``BYTES``; ``null`` (or NaN
in raw bytes) is a missing value. JSON and raw tensor data are validated alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from app.codecs.tensors import Raw, byte_elements, check_declared, numeric_array, texts
from app.contract.answers import UNCERTAINTY
from app.core.inputs import json_type
from app.core.plane import InferenceRequest
from app.core.runtime import LoadedModel, ModelRuntime
from app.errors import Fault, InvalidInput, NotFound, TooManyRows

NUMERIC_TYPES = frozenset(
    {
        "FP16",
        "FP32",
        "FP64",
        "INT8",
        "INT16",
        "INT32",
        "INT64",
        "UINT8",
        "UINT16",
        "UINT32",
        "UINT64",
    }
)
EXTENSIONS = ("binary_tensor_data",)  # the server metadata's, on REST and gRPC
CLASSIFICATION_OUTPUTS = ("prediction", "probabilities", "weights", "uncertainty")
REGRESSION_OUTPUTS = ("prediction", "std", "interval", "weights", "uncertainty")


def served(runtime: ModelRuntime, name: str, version: str = "") -> LoadedModel:
    """The model a request names; another name, or a version not served, is a 404."""
    model = runtime.require()
    if name != model.name:
        raise NotFound(
            f"model {name!r} is not served here; this server serves {model.name!r}", "name"
        )
    if version and version != model.version:
        raise NotFound(
            f"version {version!r} of {name!r} is not served; this server serves {model.version!r}",
            "version",
        )
    return model


def _bad(field: str, message: str, code: str = "invalid_tensor") -> InvalidInput:
    return InvalidInput([Fault(code, field, message)])


def output_names(model: LoadedModel) -> tuple[str, ...]:
    return CLASSIFICATION_OUTPUTS if model.task == "classification" else REGRESSION_OUTPUTS


def metadata(model: LoadedModel) -> dict[str, Any]:
    table = model.features
    inputs = [
        {"name": n, "datatype": "FP32" if n in table.numeric else "BYTES", "shape": [-1, 1]}
        for n in table.names
    ]
    n_out = {"probabilities": len(model.classes), "interval": 2, "weights": len(model.experts)}
    n_out["uncertainty"] = len(UNCERTAINTY)
    outputs = [
        {
            "name": o,
            "datatype": prediction_type(model) if o == "prediction" else "FP64",
            "shape": [-1, n_out[o]] if o in n_out else [-1],
        }
        for o in output_names(model)
    ]
    return {
        "name": model.name,
        "versions": [model.version],
        "platform": "onnxruntime-iabma",
        "inputs": inputs,
        "outputs": outputs,
        "parameters": {"task": model.task, "experts": list(model.experts)},
    }


def prediction_type(model: LoadedModel) -> str:
    if model.task == "regression":
        return "FP64"
    return "INT64" if all(isinstance(c, int) for c in model.classes) else "BYTES"


def _values(data: Any, datatype: str, n: int, field: str, name: str) -> Any:
    if isinstance(data, Raw):
        if datatype == "BYTES":
            return texts(byte_elements(data, n, field, name), field, name)
        return numeric_array(data, datatype, n, field, name)
    if isinstance(data, np.ndarray):  # gRPC's typed contents
        if data.size != n:
            raise _bad(field, f"holds {data.size} values but the shape says {n}")
        return data
    values = _flat(data, field, n)
    check_declared(values, datatype, field, name)
    return values


def _flat(data: Any, field: str, n: int) -> list[Any]:
    if not isinstance(data, list):
        raise _bad(field, f"expected an array, got {json_type(data)}")
    if data and all(isinstance(v, list) for v in data):
        if any(len(v) != 1 for v in data):
            raise _bad(field, "nested rows must hold exactly one value each")
        data = [v[0] for v in data]
    if len(data) != n:
        raise _bad(field, f"holds {len(data)} values but the shape says {n}")
    return data


def _rows(shape: Any, field: str) -> int:
    ok = isinstance(shape, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    )
    if not ok or len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
        short = isinstance(shape, list) and len(shape) <= 4
        shown = f"[{', '.join(json_type(d) for d in shape)}]" if short else json_type(shape)
        raise _bad(field, f"expected [n] or [n, 1], got {shown}")
    return int(shape[0])


def decode(
    body: Any, model: LoadedModel, max_rows: int, route: str = "oip_infer"
) -> tuple[InferenceRequest, Requested]:
    """An inference request object to an inference request, and what to answer with."""
    if not isinstance(body, dict):
        raise _bad("body", f"expected an inference request object, got {json_type(body)}")
    extra = sorted(set(body) - {"id", "parameters", "inputs", "outputs"})
    if extra:
        raise _bad(extra[0], "unknown field of an inference request", "unknown_field")
    given_id = body.get("id")
    if given_id is not None and not isinstance(given_id, str):
        raise _bad("id", f"expected a string, got {json_type(given_id)}")
    tensors = body.get("inputs")
    if not isinstance(tensors, list) or not tensors:
        raise _bad("inputs", "expected a non-empty array of input tensors")
    table = model.features
    data: dict[str, list[Any]] = {}
    n_rows: int | None = None
    for k, t in enumerate(tensors):
        where = f"inputs[{k}]"
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise _bad(where, "expected a tensor object with a name")
        name = t["name"]
        if name in table.ignored:
            continue
        if name not in table.inputs:
            raise _bad(
                f"{where}.name",
                f"unknown feature {name!r}{table.near_hint(name)}; the model takes "
                f"{table.names_text}",
            )
        if name in data:
            raise _bad(f"{where}.name", f"feature {name!r} is given twice")
        dtype = t.get("datatype")
        numeric = name in table.numeric
        wanted = "a numeric datatype such as FP32" if numeric else "BYTES"
        # A string first: an object or array is unhashable, and `in` a set raised on it.
        if not isinstance(dtype, str):
            raise _bad(
                f"{where}.datatype", f"feature {name!r} needs {wanted}, got {json_type(dtype)}"
            )
        if (numeric and dtype not in NUMERIC_TYPES) or (not numeric and dtype != "BYTES"):
            raise _bad(f"{where}.datatype", f"feature {name!r} needs {wanted}, got {dtype!r}")
        n = _rows(t.get("shape"), f"{where}.shape")
        if n_rows is not None and n != n_rows:
            raise _bad(f"{where}.shape", f"has {n} rows but the first tensor has {n_rows}")
        n_rows = n
        data[name] = _values(t.get("data"), str(dtype), n, f"{where}.data", name)
    missing = [name for name in table.names if name not in data]
    if missing:
        raise _bad(
            "inputs", f"missing tensors for features {', '.join(missing)}", "missing_feature"
        )
    assert n_rows is not None
    if n_rows == 0:
        raise _bad("inputs", "empty batch; send at least one row", "empty_batch")
    if n_rows > max_rows:
        raise TooManyRows(
            f"{n_rows} rows exceed the limit of {max_rows} (IABMA_MAX_BATCH_ROWS)", field="inputs"
        )
    columns = table.columns_fast(data)
    if columns is None:
        columns = table.columns(rows_of(data), lambda i, name: f"inputs[{name}].data[{i}]")
    request = InferenceRequest(columns, n_rows, lambda: rows_of(data), route, lambda i: f"row {i}")
    return request, _requested(body, model, given_id)


def rows_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Tensors as rows by feature name: the audit trail's view of an input (NaN as null)."""
    cols = [_plain(v) for v in data.values()]
    # decode() checked that every column has n values; map() beats a comprehension here.
    return list(map(dict, map(partial(zip, tuple(data)), zip(*cols, strict=True))))


def _plain(values: Any) -> list[Any]:
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "f" and np.isnan(values).any():
            return [None if v != v else v for v in values.tolist()]  # v != v: NaN
        return values.tolist()
    return list(values)


@dataclass(frozen=True)
class Requested:
    outputs: list[str] | None  # None: every output
    id: str | None  # the client's request id, echoed as the response's id
    binary: frozenset[str] = frozenset()  # outputs to answer as raw bytes (REST extension)


def _flag(params: Any, key: str, field: str) -> bool | None:
    if params is None:
        return None
    if not isinstance(params, dict):
        raise _bad(field, f"expected an object, got {json_type(params)}")
    value = params.get(key)
    if value is not None and not isinstance(value, bool):
        raise _bad(f"{field}.{key}", f"expected true or false, got {json_type(value)}")
    return value


def _requested(body: dict[str, Any], model: LoadedModel, given_id: str | None) -> Requested:
    all_binary = bool(_flag(body.get("parameters"), "binary_data_output", "parameters"))
    outputs = body.get("outputs")
    if outputs is None:
        binary = frozenset(output_names(model)) if all_binary else frozenset()
        return Requested(None, given_id, binary)
    known = output_names(model)
    if not isinstance(outputs, list):
        raise _bad("outputs", f"expected an array, got {json_type(outputs)}")
    names: list[str] = []
    as_binary: set[str] = set()
    for k, o in enumerate(outputs):
        name = o.get("name") if isinstance(o, dict) else None
        if name not in known:
            raise _bad(
                f"outputs[{k}].name", f"unknown output {name!r}; available: {', '.join(known)}"
            )
        assert isinstance(o, dict)
        wants = _flag(o.get("parameters"), "binary_data", f"outputs[{k}].parameters")
        if wants or (wants is None and all_binary):
            as_binary.add(name)
        names.append(name)
    return Requested(names, given_id, frozenset(as_binary))
