"""The gRPC port's life: its settings, a port it cannot have, and SIGTERM's drain."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from app.settings import SettingsError, load_settings
from tests.support.bundles import Bundles
from tests.support.harness import free_socket
from tests.support.oip import serve

NOT_SERVING = b"\x08\x02"


def test_grpc_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IABMA_GRPC_PORT", raising=False)
    assert load_settings().grpc_port is None  # off unless set
    monkeypatch.setenv("IABMA_GRPC_PORT", "")
    assert load_settings().grpc_port is None
    monkeypatch.setenv("IABMA_GRPC_PORT", "8081")
    assert load_settings().grpc_port == 8081
    monkeypatch.setenv("IABMA_GRPC_PORT", "0")
    with pytest.raises(SettingsError, match="IABMA_GRPC_PORT"):
        load_settings()


def test_a_port_in_use_stops_start_up_with_one_line(bundles: Bundles, tmp_path: Path) -> None:
    taken = free_socket()
    taken.listen()
    port = taken.getsockname()[1]
    try:
        server = serve(bundles, "demo", tmp_path, IABMA_GRPC_PORT=str(port))
        refused = pytest.raises(AssertionError, match="IABMA_GRPC_PORT: cannot listen on")
        with server.proc, refused:
            server.proc.wait_ready(timeout=60)
    finally:
        taken.close()


def test_grpc_joins_the_drain(bundles: Bundles, tmp_path: Path) -> None:
    server = serve(bundles, "demo", tmp_path, IABMA_DRAIN_SECONDS="3")
    with server.proc:
        server.proc.wait_ready()
        client = tgrpc.InferenceServerClient(server.grpc)
        x = np.array([[0.1], [0.2]], dtype=np.float32)
        inputs = []
        for name in ("x1", "x2"):
            t = tgrpc.InferInput(name, [2, 1], "FP32")
            t.set_data_from_numpy(x)
            inputs.append(t)
        assert client.is_server_ready()
        server.proc.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 2
        while client.is_server_ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not client.is_server_ready() and not client.is_model_ready("demo")
        with grpc.insecure_channel(server.grpc) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            assert check(b"", timeout=5) == NOT_SERVING
        # Still answering while draining, and audited.
        assert client.infer("demo", inputs).as_numpy("weights").shape == (2, 5)
        # No second signal: the server stops by itself once the drain time is over.
        server.proc.proc.wait(timeout=30)
        _, err = server.proc.output()
        assert server.proc.proc.returncode in (0, -signal.SIGTERM), err
        assert "Application shutdown complete" in err
    assert server.audit_rows() == 1
