"""API keys guard the Open Inference Protocol on gRPC as on REST; probes stay open."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.bundles import Bundles
from tests.support.oip import Served, serve

KEY, AUDITOR = "grpc-api-key-0123", "grpc-auditor-key"


@pytest.fixture(scope="module")
def guarded(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = serve(
        bundles, "demo", tmp_path_factory.mktemp("grpc-keys"),
        IABMA_API_KEYS=KEY, IABMA_AUDITOR_KEYS=AUDITOR,
    )  # fmt: skip
    with server.proc:
        server.proc.wait_ready()
        yield server


def inputs() -> list[grpcclient.InferInput]:
    out = []
    for name in ("x1", "x2"):
        t = grpcclient.InferInput(name, [1, 1], "FP32")
        t.set_data_from_numpy(np.array([[0.25]], dtype=np.float32))
        out.append(t)
    return out


def test_grpc_infer_needs_an_api_key(guarded: Served) -> None:
    client = grpcclient.InferenceServerClient(guarded.grpc)
    assert client.is_server_live() and client.is_server_ready()  # probes stay open
    assert client.is_model_ready("demo")
    before = guarded.audit_rows()
    for headers, status, says in (
        (None, "StatusCode.UNAUTHENTICATED", "needs a key"),
        ({"authorization": "Bearer wrong"}, "StatusCode.UNAUTHENTICATED", "unknown key"),
        ({"authorization": f"Bearer {AUDITOR}"}, "StatusCode.PERMISSION_DENIED", "auditor"),
    ):
        with pytest.raises(InferenceServerException) as err:
            client.infer("demo", inputs(), headers=headers)
        assert err.value.status() == status and says in err.value.message(), err.value
    with pytest.raises(InferenceServerException):
        client.get_model_metadata("demo")
    assert guarded.audit_rows() == before  # refused calls leave no record
    result = client.infer("demo", inputs(), headers={"authorization": f"Bearer {KEY}"})
    assert result.as_numpy("weights").shape == (1, 5)
    by_header = client.infer("demo", inputs(), headers={"x-api-key": KEY})
    assert np.array_equal(by_header.as_numpy("weights"), result.as_numpy("weights"))
    assert guarded.audit_rows() == before + 2
