"""tritonclient[http] and tritonclient[grpc], with their defaults, against a real uvicorn.

Every answer is compared with the native ``POST /predict`` for the same rows, for a
classification bundle with integer labels (demo), a regression bundle with categorical
features (credit: BYTES inputs) and a classification bundle with string labels and
categorical features (creditcls: BYTES in and out).
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from tests.support.bundles import Bundles, instances
from tests.support.oip import Served

ROWS = 40
UNCERTAINTY = ("total", "aleatoric", "epistemic", "selection")


def frame_of(bundles: Bundles, name: str) -> pd.DataFrame:
    return getattr(bundles, name).X.iloc[:ROWS].reset_index(drop=True)


def feature_types(served: Served) -> dict[str, str]:
    meta = thttp.InferenceServerClient(served.http).get_model_metadata(served.name)
    return {t["name"]: t["datatype"] for t in meta["inputs"]}


def arrays(frame: pd.DataFrame, types: dict[str, str]) -> dict[str, np.ndarray]:
    """Each feature as the [n, 1] array a client holds: FP32, or BYTES as bytes objects."""
    out = {}
    for name, dtype in types.items():
        col = frame[name]
        if dtype == "FP32":
            out[name] = col.to_numpy(dtype=np.float32).reshape(-1, 1)
        else:
            out[name] = np.array([str(v).encode() for v in col], dtype=object).reshape(-1, 1)
    return out


def make_inputs(module: Any, data: dict[str, np.ndarray], binary: Any) -> list[Any]:
    """``binary(name)``: send this tensor as binary data (http only; gRPC is always raw)."""
    inputs = []
    for name, arr in data.items():
        t = module.InferInput(name, list(arr.shape), "FP32" if arr.dtype != object else "BYTES")
        if module is thttp:
            t.set_data_from_numpy(arr, binary_data=binary(name))
        else:
            t.set_data_from_numpy(arr)
        inputs.append(t)
    return inputs


def native(served: Served, frame: pd.DataFrame) -> dict[str, Any]:
    body = {"instances": instances(frame), "format": "columnar"}
    r = httpx.post(f"{served.base_url}/predict", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["predictions"]


def expected(ref: dict[str, Any]) -> dict[str, np.ndarray]:
    """The native answer under the Open Inference Protocol's output names."""
    out = {
        "weights": np.asarray(ref["weights"]),
        "uncertainty": np.column_stack([ref["uncertainty"][k] for k in UNCERTAINTY]),
    }
    if "label" in ref:
        out["prediction"] = np.asarray([str(v) for v in ref["label"]])
        out["probabilities"] = np.asarray(ref["probabilities"])
    else:
        out["prediction"] = np.asarray(ref["mean"])
        out["std"] = np.asarray(ref["std"])
        out["interval"] = np.column_stack([ref["interval"]["lower"], ref["interval"]["upper"]])
    return out


def check(result: Any, want: dict[str, np.ndarray], names: list[str]) -> None:
    for name in names:
        got = result.as_numpy(name)
        assert got is not None, name
        if want[name].dtype.kind == "U":
            labels = [v.decode() if isinstance(v, bytes) else str(v) for v in got.ravel()]
            assert labels == want[name].tolist(), name
        else:
            np.testing.assert_allclose(
                got.astype(np.float64).reshape(want[name].shape), want[name], rtol=0, atol=1e-6
            )


def test_metadata_through_both_clients(served: Served, bundles: Bundles) -> None:
    version = getattr(bundles, served.name).version
    h = thttp.InferenceServerClient(served.http)
    g = tgrpc.InferenceServerClient(served.grpc)
    for client in (h, g):
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(served.name)
    assert h.get_server_metadata()["extensions"] == ["binary_tensor_data"]
    assert list(g.get_server_metadata().extensions) == ["binary_tensor_data"]
    hm = h.get_model_metadata(served.name)
    gm = g.get_model_metadata(served.name, as_json=True)
    assert hm["versions"] == gm["versions"] == [version]
    assert [(t["name"], t["datatype"]) for t in hm["inputs"]] == [
        (t["name"], t["datatype"]) for t in gm["inputs"]
    ]
    names = list(getattr(bundles, served.name).X.columns)
    assert [t["name"] for t in hm["inputs"]] == names
    assert {o["name"] for o in gm["outputs"]} >= {"prediction", "weights", "uncertainty"}


MODES = ["http-binary", "http-json", "http-mix", "grpc"]


@pytest.mark.parametrize("mode", MODES)
def test_infer_equals_native_predict(served: Served, bundles: Bundles, mode: str) -> None:
    frame = frame_of(bundles, served.name)
    types = feature_types(served)
    data = arrays(frame, types)
    want = expected(native(served, frame))
    names = list(want)
    if mode == "grpc":
        client: Any = tgrpc.InferenceServerClient(served.grpc)
        result = client.infer(served.name, make_inputs(tgrpc, data, None))
    else:
        client = thttp.InferenceServerClient(served.http)
        if mode == "http-binary":  # tritonclient's defaults: binary in, binary out
            result = client.infer(served.name, make_inputs(thttp, data, lambda n: True))
            outputs = result.get_response()["outputs"]
            assert all("binary_data_size" in o["parameters"] for o in outputs)
        elif mode == "http-json":
            outs = [thttp.InferRequestedOutput(n, binary_data=False) for n in names]
            inputs = make_inputs(thttp, data, lambda n: False)
            result = client.infer(served.name, inputs, outputs=outs)
            assert all("data" in o for o in result.get_response()["outputs"])
        else:  # numeric tensors binary, BYTES as JSON (or every other one); outputs alike
            order = list(data)
            binary = {n for i, n in enumerate(order) if types[n] == "FP32" and i % 2 == 0}
            outs = [
                thttp.InferRequestedOutput(n, binary_data=i % 2 == 0) for i, n in enumerate(names)
            ]
            inputs = make_inputs(thttp, data, lambda n: n in binary)
            result = client.infer(served.name, inputs, outputs=outs)
            sent = {o["name"]: "data" in o for o in result.get_response()["outputs"]}
            assert sent == {n: i % 2 == 1 for i, n in enumerate(names)}
    check(result, want, names)


def test_requested_outputs_are_honoured(served: Served, bundles: Bundles) -> None:
    frame = frame_of(bundles, served.name)
    data = arrays(frame, feature_types(served))
    want = expected(native(served, frame))
    h = thttp.InferenceServerClient(served.http)
    r = h.infer(served.name, make_inputs(thttp, data, lambda n: True),
                outputs=[thttp.InferRequestedOutput("weights")])  # fmt: skip
    assert [o["name"] for o in r.get_response()["outputs"]] == ["weights"]
    check(r, want, ["weights"])
    g = tgrpc.InferenceServerClient(served.grpc)
    r = g.infer(served.name, make_inputs(tgrpc, data, None),
                outputs=[tgrpc.InferRequestedOutput("weights")])  # fmt: skip
    assert [o.name for o in r.get_response().outputs] == ["weights"]
    check(r, want, ["weights"])


def test_no_content_type_is_read_as_json(served: Served, bundles: Bundles) -> None:
    frame = frame_of(bundles, served.name).iloc[:3]
    types = feature_types(served)
    inputs = [
        {
            "name": n,
            "datatype": t,
            "shape": [3, 1],
            "data": [float(v) if t == "FP32" else str(v) for v in frame[n]],
        }
        for n, t in types.items()
    ]
    body = httpx.Request("POST", "/", json={"inputs": inputs}).content
    r = httpx.post(f"{served.base_url}/v2/models/{served.name}/infer", content=body)
    assert r.request.headers.get("content-type") is None
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"


def test_audit_rows_equal_successful_calls(served: Served, bundles: Bundles) -> None:
    """REST and gRPC, good and bad calls: exactly one record per successful call."""
    frame = frame_of(bundles, served.name).iloc[:5]
    data = arrays(frame, feature_types(served))
    h = thttp.InferenceServerClient(served.http)
    g = tgrpc.InferenceServerClient(served.grpc)
    before = served.audit_rows()
    ok = 0
    for _ in range(3):
        h.infer(served.name, make_inputs(thttp, data, lambda n: True))
        g.infer(served.name, make_inputs(tgrpc, data, None))
        ok += 2
    bad_http = make_inputs(thttp, data, lambda n: True)[1:]  # a feature missing
    with pytest.raises(Exception, match="missing tensors"):
        h.infer(served.name, bad_http)
    with pytest.raises(Exception, match="missing tensors"):
        g.infer(served.name, make_inputs(tgrpc, data, None)[1:])
    with pytest.raises(Exception, match="not served"):
        g.infer("nope", make_inputs(tgrpc, data, None))
    assert served.audit_rows() - before == ok
