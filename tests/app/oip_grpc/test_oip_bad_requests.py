"""Bad binary REST requests and bad gRPC requests, each with the status it must get.

The credit bundle (numeric and categorical features) on a real uvicorn with small limits
(50 rows, 64 KiB bodies). Every bad request gets a 4xx or a gRPC status naming what is
wrong, never a 5xx; the same fault gets the same message on REST and gRPC; and only the
successful calls leave audit records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pandas as pd
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from tests.support.bundles import Bundles
from tests.support.oip import Served, serve

ROWS = 2
MAX_ROWS = 50
MAX_BODY = 65_536
NUM, CAT = "duration", "checking_status"  # a numeric and a categorical feature of credit


@pytest.fixture(scope="module")
def credit(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    env = {"IABMA_MAX_BATCH_ROWS": str(MAX_ROWS), "IABMA_MAX_BODY_BYTES": str(MAX_BODY)}
    server = serve(bundles, "credit", tmp_path_factory.mktemp("bad"), **env)
    with server.proc:
        server.proc.wait_ready()
        yield server


@pytest.fixture(scope="module")
def frame(bundles: Bundles) -> pd.DataFrame:
    return bundles.credit.X


def _f8(*values: float) -> bytes:
    return np.array(values, dtype="<f8").tobytes()


def _f4(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


def strings(values: list[str]) -> bytes:
    return b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in values)


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    raw: bytes
    size: int | None = None  # binary_data_size as declared; None: len(raw)


@dataclass
class Request:
    tensors: list[Tensor]
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level JSON fields
    header_length: str | None = None  # None: the true length
    trailing: bytes = b""  # appended after the tensors' data
    headers: dict[str, str] = field(default_factory=dict)
    model: str = "credit"

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)


def good(frame: pd.DataFrame, rows: int = ROWS) -> Request:
    tensors = []
    for name in frame.columns:
        col = frame[name].iloc[:rows]
        if pd.api.types.is_numeric_dtype(col):
            raw = col.to_numpy(dtype="<f4").tobytes()
            tensors.append(Tensor(name, "FP32", [rows, 1], raw))
        else:
            tensors.append(Tensor(name, "BYTES", [rows, 1], strings([str(v) for v in col])))
    return Request(tensors)


def rest(served: Served, req: Request) -> httpx.Response:
    inputs = [
        {
            "name": t.name,
            "datatype": t.datatype,
            "shape": t.shape,
            "parameters": {"binary_data_size": len(t.raw) if t.size is None else t.size},
        }
        for t in req.tensors
    ]
    header = orjson.dumps({"inputs": inputs, **req.extra})
    body = header + b"".join(t.raw for t in req.tensors) + req.trailing
    length = req.header_length if req.header_length is not None else str(len(header))
    headers = {"Inference-Header-Content-Length": length, **req.headers}
    url = f"{served.base_url}/v2/models/{req.model}/infer"
    return httpx.post(url, content=body, headers=headers, timeout=30)


def message(r: httpx.Response) -> str:
    return str(r.json()["error"])


def setting(name: str, **kw: Any) -> Callable[[Request], None]:
    def change(req: Request) -> None:
        for key, value in kw.items():
            setattr(req.tensor(name), key, value)

    return change


def with_(**kw: Any) -> Callable[[Request], None]:
    def change(req: Request) -> None:
        for key, value in kw.items():
            setattr(req, key, value)

    return change


def last_size_plus_4(req: Request) -> None:
    t = req.tensors[-1]
    t.size = len(t.raw) + 4


# (case, change to a good request, expected status, words the message must hold)
REST_CASES: list[tuple[str, Callable[[Request], None], int, str]] = [
    ("good", lambda r: None, 200, ""),
    ("sizes do not add up", with_(trailing=b"\0\0\0\0"), 400, "add up to"),
    ("size past the end", last_size_plus_4, 400, "run past the binary data"),
    ("header length past the body", with_(header_length="99999"), 400, "whole body is"),
    ("header length not a number", with_(header_length="ten"), 400, "expected a byte count"),
    ("FP64 with FP32's bytes", setting(NUM, datatype="FP64"), 400, f"tensor '{NUM}': 2 FP64"),
    ("FP32 with a byte short", setting(NUM, raw=b"\0" * 7), 400, "take 8 bytes"),
    ("BYTES length past the end", setting(CAT, raw=struct.pack("<I", 99) + b"<0"), 400,
     f"tensor '{CAT}': BYTES element 0 says 99 bytes"),
    ("BYTES length cut short", setting(CAT, raw=strings(["<0", "<0"]) + b"\1\0"), 400,
     "4-byte length would run past"),
    ("BYTES count not the shape", setting(CAT, raw=strings(["<0"] * 3)), 400,
     "holds 3 BYTES elements but the shape says 2"),
    ("BYTES not UTF-8", setting(CAT, raw=strings(["<0"]) + struct.pack("<I", 1) + b"\xff"), 400,
     "not UTF-8"),
    ("BYTES unknown category", setting(CAT, raw=strings(["<0", "nope"])), 400, "nope"),
    ("negative binary_data_size", setting(NUM, size=-8), 400, "expected a byte count"),
    # Beyond float32, negative too: served as -inf when only `x > max` was checked.
    ("FP64 beyond float32", setting(NUM, datatype="FP64", raw=_f8(1.0, -1e39)), 400,
     f"inputs[{NUM}].data[1]: -1e+39 is outside the float32 range"),
    ("FP64 beyond float32, positive", setting(NUM, datatype="FP64", raw=_f8(3.5e38, 1.0)), 400,
     f"inputs[{NUM}].data[0]: 3.5e+38 is outside the float32 range"),
    ("FP32 minus infinity", setting(NUM, raw=_f4(1.0, -np.inf)), 400,
     f"inputs[{NUM}].data[1]: -inf is not a finite number"),
    ("wrong Content-Type", with_(headers={"Content-Type": "text/csv"}), 400, "Content-Type"),
    ("another model", with_(model="demo"), 404, "not served here"),
    ("binary_data_output not a bool", with_(extra={"parameters": {"binary_data_output": 1}}),
     400, "binary_data_output: expected true or false"),
]  # fmt: skip


@pytest.mark.parametrize("case", REST_CASES, ids=[c[0] for c in REST_CASES])
def test_bad_binary_request(credit: Served, frame: pd.DataFrame, case: Any) -> None:
    _, change, status, words = case
    req = good(frame)
    change(req)
    r = rest(credit, req)
    assert r.status_code == status, r.text
    if words:
        assert words in message(r)


def test_binary_without_the_header_and_json_data_beside_binary(
    credit: Served, frame: pd.DataFrame
) -> None:
    req = good(frame)
    header = {
        "inputs": [
            {"name": t.name, "datatype": t.datatype, "shape": t.shape,
             "parameters": {"binary_data_size": len(t.raw)}}
            for t in req.tensors
        ]
    }  # fmt: skip
    url = f"{credit.base_url}/v2/models/credit/infer"
    r = httpx.post(url, content=orjson.dumps(header))
    assert r.status_code == 400 and "no Inference-Header-Content-Length" in message(r)
    r = httpx.post(url, content=orjson.dumps(header) + b"".join(t.raw for t in req.tensors))
    assert r.status_code == 400  # without the header, the binary data is read as JSON
    header["inputs"][0]["data"] = ["<0", "<0"]
    body = orjson.dumps(header)
    r = httpx.post(url, content=body, headers={"Inference-Header-Content-Length": str(len(body))})
    assert r.status_code == 400 and "must not be in the JSON too" in message(r)


def test_limits_on_rest(credit: Served, frame: pd.DataFrame) -> None:
    r = rest(credit, good(pd.concat([frame] * 1).iloc[: MAX_ROWS + 1], MAX_ROWS + 1))
    assert r.status_code == 413 and "IABMA_MAX_BATCH_ROWS" in message(r)
    r = rest(credit, with_tail(good(frame), MAX_BODY))
    assert r.status_code == 413


def with_tail(req: Request, size: int) -> Request:
    req.trailing = b"\0" * size
    return req


# -- gRPC ---------------------------------------------------------------------------------


def grpc_request(req: Request) -> Any:
    msg = pb.ModelInferRequest(model_name=req.model)
    for t in req.tensors:
        msg.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        msg.raw_input_contents.append(t.raw)
    return msg


def call(served: Served, method: str, msg: Any) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(served.grpc) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            getattr(stub, method)(msg, timeout=30)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def typed(frame: pd.DataFrame, rows: int = ROWS) -> Any:
    msg = pb.ModelInferRequest(model_name="credit")
    for name in frame.columns:
        col = frame[name].iloc[:rows]
        t = msg.inputs.add(name=name, shape=[rows])
        if pd.api.types.is_numeric_dtype(col):
            t.datatype = "FP64"
            t.contents.fp64_contents.extend(col.astype(float).tolist())
        else:
            t.datatype = "BYTES"
            t.contents.bytes_contents.extend(str(v).encode() for v in col)
    return msg


def drop_raw(msg: Any) -> Any:
    del msg.raw_input_contents[-1]
    return msg


def mutate(change: Callable[[Request], None]) -> Callable[[pd.DataFrame], Any]:
    def build(frame: pd.DataFrame) -> Any:
        req = good(frame)
        change(req)
        return grpc_request(req)

    return build


def typed_short(frame: pd.DataFrame) -> Any:
    msg = typed(frame)
    del msg.inputs[1].contents.fp64_contents[-1]
    return msg


def typed_beyond(frame: pd.DataFrame) -> Any:
    msg = typed(frame)
    numeric = next(t for t in msg.inputs if t.name == NUM)
    numeric.contents.fp64_contents[1] = -1e39
    return msg


def raw_and_contents(frame: pd.DataFrame) -> Any:
    msg = grpc_request(good(frame))
    msg.inputs[0].contents.bytes_contents.append(b"<0")
    return msg


def with_fields(**kw: Any) -> Callable[[pd.DataFrame], Any]:
    def build(frame: pd.DataFrame) -> Any:
        msg = grpc_request(good(frame))
        for key, value in kw.items():
            if key == "outputs":
                msg.outputs.add(name=value)
            else:
                setattr(msg, key, value)
        return msg

    return build


Code = grpc.StatusCode
GRPC_CASES: list[tuple[str, Callable[[pd.DataFrame], Any], grpc.StatusCode, str]] = [
    ("good raw", mutate(lambda r: None), Code.OK, ""),
    ("good typed contents", typed, Code.OK, ""),
    ("raw entries not one per input", lambda f: drop_raw(grpc_request(good(f))),
     Code.INVALID_ARGUMENT, "raw_input_contents"),
    ("raw and contents", raw_and_contents, Code.INVALID_ARGUMENT, "contents must be empty"),
    ("FP32 with a byte short", mutate(setting(NUM, raw=b"\0" * 7)), Code.INVALID_ARGUMENT,
     "take 8 bytes"),
    ("BYTES length past the end", mutate(setting(CAT, raw=struct.pack("<I", 99) + b"<0")),
     Code.INVALID_ARGUMENT, "says 99 bytes"),
    ("a feature missing", mutate(lambda r: r.tensors.pop()), Code.INVALID_ARGUMENT,
     "missing tensors"),
    ("typed contents short", typed_short, Code.INVALID_ARGUMENT, "but the shape says 2"),
    ("raw FP64 beyond float32", mutate(setting(NUM, datatype="FP64", raw=_f8(-1e39, 1.0))),
     Code.INVALID_ARGUMENT, f"inputs[{NUM}].data[0]: -1e+39 is outside the float32 range"),
    ("typed FP64 beyond float32", typed_beyond, Code.INVALID_ARGUMENT,
     f"inputs[{NUM}].data[1]: -1e+39 is outside the float32 range"),
    ("unknown output", with_fields(outputs="probabilities"), Code.INVALID_ARGUMENT,
     "unknown output 'probabilities'"),
    ("another model", with_fields(model_name="demo"), Code.NOT_FOUND, "not served here"),
    ("another version", with_fields(model_version="1999"), Code.NOT_FOUND, "'1999'"),
    ("too many rows", lambda f: grpc_request(good(f, MAX_ROWS + 1)), Code.INVALID_ARGUMENT,
     "IABMA_MAX_BATCH_ROWS"),
    ("message over the size limit", mutate(with_(tensors=[Tensor(NUM, "FP32", [1], b"\0" * 2 *
     MAX_BODY)])), Code.RESOURCE_EXHAUSTED, ""),
]  # fmt: skip


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c[0] for c in GRPC_CASES])
def test_bad_grpc_request(credit: Served, frame: pd.DataFrame, case: Any) -> None:
    _, build, code, words = case
    got, details = call(credit, "ModelInfer", build(frame))
    assert got == code, details
    assert words in details


def test_grpc_and_rest_give_the_same_message(credit: Served, frame: pd.DataFrame) -> None:
    for change in (setting(NUM, raw=b"\0" * 7), setting(CAT, raw=strings(["<0", "nope"]))):
        req = good(frame)
        change(req)
        code, details = call(credit, "ModelInfer", grpc_request(req))
        assert code == Code.INVALID_ARGUMENT
        assert details == message(rest(credit, req))


def test_metadata_calls_name_a_missing_model(credit: Served) -> None:
    code, details = call(credit, "ModelReady", pb.ModelReadyRequest(name="demo"))
    assert code == Code.NOT_FOUND and "not served here" in details
    code, _ = call(credit, "ModelMetadata", pb.ModelMetadataRequest(name="demo"))
    assert code == Code.NOT_FOUND


def health(served: Served, service: str) -> tuple[grpc.StatusCode, bytes]:
    """grpc.health.v1 Check, with the two tiny messages encoded by hand."""
    request = b"" if not service else b"\n" + bytes([len(service)]) + service.encode()
    with grpc.insecure_channel(served.grpc) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            return Code.OK, check(request, timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), b""


def test_health_service(credit: Served) -> None:
    serving = b"\x08\x01"  # status = SERVING
    assert health(credit, "") == (Code.OK, serving)
    assert health(credit, "inference.GRPCInferenceService") == (Code.OK, serving)
    assert health(credit, "no.such.Service")[0] == Code.NOT_FOUND


def test_only_successful_calls_are_audited(credit: Served, frame: pd.DataFrame) -> None:
    """Every case of both tables once more: the trail grows by the successful ones only."""
    before = credit.audit_rows()
    for _, change, status, _ in REST_CASES:
        req = good(frame)
        change(req)
        assert rest(credit, req).status_code == status
    for _, build, code, _ in GRPC_CASES:
        assert call(credit, "ModelInfer", build(frame))[0] == code
    good_calls = sum(c[2] == 200 for c in REST_CASES) + sum(c[2] == Code.OK for c in GRPC_CASES)
    assert good_calls == 3
    assert credit.audit_rows() - before == good_calls


def test_a_request_id_names_one_record_over_grpc_and_rest(
    credit: Served, frame: pd.DataFrame
) -> None:
    before = credit.audit_rows()
    metadata = (("x-request-id", "grpc-once"),)
    with grpc.insecure_channel(credit.grpc) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        stub.ModelInfer(typed(frame), metadata=metadata, timeout=30)
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(typed(frame), metadata=metadata, timeout=30)
    assert err.value.code() == Code.ALREADY_EXISTS
    details = err.value.details() or ""
    assert "request id 'grpc-once' already names an audited prediction of model 'credit'" in details
    again = rest(credit, with_headers(good(frame), {"X-Request-ID": "grpc-once"}))
    assert again.status_code == 409 and "grpc-once" in message(again)
    assert credit.audit_rows() - before == 1


def with_headers(req: Request, headers: dict[str, str]) -> Request:
    req.headers = headers
    return req
