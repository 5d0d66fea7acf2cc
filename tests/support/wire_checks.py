"""Checks of ModelInfer's one-pass path (app.oip_grpc.wire), run in a child process:
the app's protobuf modules and tritonclient's, imported by the gRPC tests, define the
same messages and cannot share one process.

    python -m tests.support.wire_checks STORE  < rows.json   # {"demo": [...], ...}
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from app.codecs import oip
from app.core.plane import InferenceResult
from app.core.runtime import LoadedModel, ModelRuntime
from app.errors import ServingError
from app.oip_grpc import codec, wire
from app.oip_grpc.stubs import pb
from app.settings import Settings

DOUBTS = ("outputs", "fp64", "shape", "short", "contents", "twice", "too_many", "infinite",
          "empty")  # fmt: skip


def load(store: Path, name: str) -> LoadedModel:
    return asyncio.run(ModelRuntime(Settings(store=store, model_name=name)).load())


def call(x: np.ndarray, **kw: Any) -> Any:
    req = pb.ModelInferRequest(model_name="demo", **kw)
    for j, name in enumerate(("x1", "x2")):
        req.inputs.add(name=name, datatype="FP32", shape=[len(x), 1])
        req.raw_input_contents.append(np.ascontiguousarray(x[:, j], "<f4").tobytes())
    return req


def same_answer(model: LoadedModel, rows: list[dict[str, Any]]) -> None:
    """The answer's bytes parse to the general path's message, for cached heads and not."""
    body = {
        "id": "call-1",
        "inputs": [
            {"name": k, "datatype": "FP32" if k in model.features.numeric else "BYTES",
             "shape": [len(rows)], "data": [r[k] for r in rows]}
            for k in model.features.names
        ],
    }  # fmt: skip
    for n in (1, 3, 1, len(rows)):
        inputs = [{**t, "shape": [n], "data": t["data"][:n]} for t in body["inputs"]]
        request, wanted = oip.decode({**body, "inputs": inputs}, model, 1000)
        result = InferenceResult(model, model.predictor.predict(request.columns))
        for rid in ("r1", "r2"):
            got = pb.ModelInferResponse.FromString(wire.response_bytes(result, wanted, rid))
            assert got == codec.response(result, wanted, rid), (model.name, n)
            assert got.id == "call-1" and got.parameters["request_id"].string_param == rid


def one_pass(model: LoadedModel) -> None:
    """Raw FP32 calls take the one pass, to the general path's request."""
    x = np.array([[0.5, -0.3], [np.nan, 2.0], [1.0, 1.0]])
    req = call(x, id="mine")
    fast = wire.fast_request(req, model, 1000)
    assert fast is not None
    request, wanted = fast
    general, general_wanted = oip.decode(codec.request_body(req), model, 1000, "oip_grpc")
    assert wanted == general_wanted and request.n == general.n == 3
    for name, col in general.columns.items():
        np.testing.assert_array_equal(request.columns[name], col)
    assert callable(request.instances) and callable(general.instances)
    assert request.instances() == general.instances()
    assert request.instances()[1]["x1"] is None  # NaN is a missing value


def doubted(model: LoadedModel, change: str) -> None:
    """A call the one pass doubts goes to the general path, which names any fault."""
    x = np.array([[np.inf if change == "infinite" else 0.5, -0.3]] * 3)
    req = call(x[:0] if change == "empty" else x)
    t = req.inputs[0]
    if change == "outputs":
        req.outputs.add(name="weights")
    elif change == "fp64":
        t.datatype = "FP64"
    elif change == "shape":
        t.shape[:] = [3, 2]
    elif change == "short":
        req.raw_input_contents[0] = req.raw_input_contents[0][:-1]
    elif change == "contents":
        t.contents.fp32_contents.extend([1.0, 2.0, 3.0])
    elif change == "twice":
        req.inputs[1].name = "x1"
    limit = 2 if change == "too_many" else 1000
    assert wire.fast_request(req, model, limit) is None, change
    if change not in ("outputs", "fp64"):
        try:
            oip.decode(codec.request_body(req), model, limit, "oip_grpc")
        except ServingError:
            return
        raise AssertionError(f"{change}: the general path took it")


def main(store: Path, rows: dict[str, list[dict[str, Any]]]) -> int:
    checks = 0
    for name, its_rows in rows.items():
        model = load(store, name)
        same_answer(model, its_rows)
        checks += 1
        if name == "demo":
            one_pass(model)
            for change in DOUBTS:
                doubted(model, change)
            checks += 1 + len(DOUBTS)
        else:  # categorical features: the general path
            assert wire.fast_request(call(np.zeros((2, 2))), model, 1000) is None
            checks += 1
    print("checks passed:", checks)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), json.load(sys.stdin)))
