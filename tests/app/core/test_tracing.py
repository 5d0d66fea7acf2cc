"""OpenTelemetry: off by default; with OTEL_* set, spans reach a real OTLP/HTTP collector."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from app.core.tracing import requested
from app.settings import SettingsError
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornProcess

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Collector(http.server.ThreadingHTTPServer):
    """Receives OTLP/HTTP protobuf exports and keeps every span."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.spans: list[dict[str, str]] = []
        self.lock = threading.Lock()


class _Receive(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        with self.server.lock:
            for rs in req.resource_spans:
                service = next(
                    a.value.string_value for a in rs.resource.attributes if a.key == "service.name"
                )
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.server.spans.append({
                            "name": s.name, "trace_id": s.trace_id.hex(),
                            "parent": s.parent_span_id.hex(), "service": service,
                        })  # fmt: skip
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_spans_continue_the_callers_trace(
    bundles: Bundles, collector: Collector, tmp_path: Path
) -> None:
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{tmp_path / 'audit.db'}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_SERVICE_NAME": "iabma-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    with UvicornProcess(env, cwd=tmp_path) as served:
        served.wait_ready()
        r = httpx.post(
            served.base_url + "/predict",
            json={"instances": [{"x1": 0.1, "x2": 0.2}]},
            headers={"traceparent": traceparent, "X-Request-ID": "traced-1"},
        )
        assert r.status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with collector.lock:
                names = {s["name"] for s in collector.spans if s["trace_id"] == TRACE_ID}
            if {"decode", "graph", "audit"} <= names:
                break
            time.sleep(0.1)
        _, _out, err = served.terminate()
    ours = [s for s in collector.spans if s["trace_id"] == TRACE_ID]
    assert {"decode", "graph", "audit"} <= {s["name"] for s in ours}, ours
    server = [s for s in ours if s["parent"] == PARENT_ID]
    assert len(server) == 1 and server[0]["name"].startswith("POST /predict"), ours
    assert {s["service"] for s in ours} == {"iabma-under-test"}
    assert not [s for s in collector.spans if "readyz" in s["name"]], "probes are not traced"
    lines = [json.loads(x) for x in err.splitlines() if x.startswith("{") and "traced-1" in x]
    assert lines and lines[0]["trace_id"] == TRACE_ID and lines[0]["request_id"] == "traced-1"


def test_off_by_default(bundles: Bundles, tmp_path: Path) -> None:
    with AsgiHarness(make_settings(bundles.store, tmp_path)) as app:
        assert not app.service.tracing.enabled
        assert app.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]}).status_code == 200


@pytest.mark.parametrize(
    ("env", "exporter"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
    ],
)
def test_which_variables_turn_it_on(env: dict[str, str], exporter: str | None) -> None:
    assert requested(env) == exporter


def test_an_unknown_exporter_is_named() -> None:
    with pytest.raises(SettingsError, match="OTEL_TRACES_EXPORTER: 'zipkin' is not supported"):
        requested({"OTEL_TRACES_EXPORTER": "zipkin"})
