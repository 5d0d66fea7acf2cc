"""The rule every request id follows, wherever one comes in: the X-Request-ID header on REST
and OIP REST, gRPC metadata, a query's ``request_id``, an outcome's. Python's ``$`` matched
before a final newline, so ``"abc\\n"`` passed the rule that keeps ids out of log lines and
the trail's index intact."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.contract.request import REQUEST_ID
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import PYTHON, ROOT, AsgiHarness, UvicornHarness
from tests.support.oip import serve

NEWLINED = ["abc\n", "abc\r\n", "abc\n\n", "\nabc", "a" * 128 + "\n", "abc\r", "ab\nc"]
VALID = ["abc", "a" * 128, "01a2246b4c27ffd9ca889:x/y+z=w.v_u-t"]
ROW = {"instances": [{"x1": 0.4, "x2": -0.3}]}


@pytest.mark.parametrize("text", NEWLINED)
def test_the_rule_refuses_a_newline_however_it_is_applied(text: str) -> None:
    assert REQUEST_ID.match(text) is None
    assert REQUEST_ID.fullmatch(text) is None
    assert REQUEST_ID.search(text) is None


@pytest.mark.parametrize("text", VALID)
def test_the_rule_takes_ids_up_to_128_characters(text: str) -> None:
    assert REQUEST_ID.match(text) is not None


def test_the_openapi_pattern_refuses_it_too(bundles: Bundles, tmp_path: Path) -> None:
    """The pattern is published in the OpenAPI document, read as JSON Schema by clients."""
    with AsgiHarness(make_settings(bundles.store, tmp_path)) as app:
        doc = app.get("/openapi.json").json()
    patterns = {
        p["schema"]["pattern"]
        for item in doc["paths"].values()
        for op in item.values()
        for p in op.get("parameters", [])
        if p["name"].lower() == "x-request-id"
    }
    assert patterns == {REQUEST_ID.pattern}
    schema = {"type": "string", "pattern": REQUEST_ID.pattern}
    for text in NEWLINED:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(text, schema)
    jsonschema.validate("abc", schema)


async def _asgi(
    app: Any, method: str, path: str, headers: list, body: bytes
) -> tuple[int, dict, bytes]:
    """One request straight into the ASGI app, headers as given: HTTP/1.1 parsers refuse a
    newline in a header value, but the app must not rely on the server in front of it."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }  # fmt: skip
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    out: list[dict] = []

    async def receive() -> dict:
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        out.append(message)

    await app(scope, receive, send)
    start = next(m for m in out if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), content


@pytest.fixture(scope="module")
def asgi(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiHarness]:
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("rid"), audit_payload="full")
    with AsgiHarness(settings) as app:
        yield app


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/predict", ROW),
        ("/v2/models/demo/infer",
         {"inputs": [{"name": n, "shape": [1], "datatype": "FP64", "data": [0.1]}
                     for n in ("x1", "x2")]}),
        ("/feedback", {"outcomes": []}),
    ],
)  # fmt: skip
@pytest.mark.parametrize("rid", NEWLINED)
def test_x_request_id_with_a_newline_is_a_400_on_rest_and_oip(
    asgi: AsgiHarness, path: str, body: dict, rid: str
) -> None:
    headers = [(b"content-type", b"application/json"), (b"x-request-id", rid.encode())]
    status, got, content = asgi.run(
        _asgi(asgi.app, "POST", path, headers, json.dumps(body).encode())
    )
    assert status == 400, content
    answer = json.loads(content)["error"]
    text = answer if isinstance(answer, str) else answer["message"]
    assert text.startswith("header X-Request-ID: must be 1-128 characters"), text
    assert got[b"x-request-id"].decode() != rid, "a fresh id is echoed, not the bad one"
    ok, _h, _c = asgi.run(_asgi(asgi.app, "POST", path, headers[:1], json.dumps(body).encode()))
    assert ok in (200, 422), "the same request without the header is judged on its body"


def test_grpc_metadata_with_a_newline_gets_a_fresh_id() -> None:
    """The servicer's reader of the metadata, in a child process: tritonclient's modules,
    which other tests import, define the same protobuf messages as the server's."""
    code = (
        "import json, sys\n"
        "from app.oip_grpc.servicer import request_id\n"
        "class C:\n"
        "    def __init__(self, v): self.v = v\n"
        "    def invocation_metadata(self): return [('x-request-id', self.v)]\n"
        "print(json.dumps([request_id(C(v)) for v in json.loads(sys.argv[1])]))\n"
    )
    given = [*NEWLINED, "given-1"]
    out = subprocess.run(
        [PYTHON, "-c", code, json.dumps(given)], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    made = json.loads(out.stdout)
    assert made[-1] == "given-1"
    for rid, fresh in zip(NEWLINED, made, strict=False):
        assert fresh != rid and REQUEST_ID.fullmatch(fresh), (rid, fresh)


def test_grpc_clients_cannot_send_one_at_all(bundles: Bundles, tmp_path: Path) -> None:
    """The transport refuses a newline in metadata before it leaves the client; the test
    above holds the servicer to the rule should another client try."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    served = serve(bundles, "demo", tmp_path)
    with served.proc:
        served.proc.wait_ready()
        client = grpcclient.InferenceServerClient(served.grpc)
        inputs = []
        for name in ("x1", "x2"):
            t = grpcclient.InferInput(name, [1, 1], "FP32")
            t.set_data_from_numpy(np.array([[0.25]], dtype=np.float32))
            inputs.append(t)
        ok = client.infer("demo", inputs, headers={"x-request-id": "given-2"})
        assert ok.get_response().id == "given-2"
        with pytest.raises(InferenceServerException):
            client.infer("demo", inputs, headers={"x-request-id": "abc\n"})


def test_a_request_id_in_a_query_with_a_newline_is_a_422(bundles: Bundles, tmp_path: Path) -> None:
    with UvicornHarness(make_settings(bundles.store, tmp_path)) as app:
        r = app.get("/weights?request_id=abc%0A")
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == "request_id"
        assert app.get("/weights?request_id=abc").status_code == 404
