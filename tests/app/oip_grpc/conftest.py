"""One real uvicorn per bundle, with the gRPC port on (see oip_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.bundles import Bundles
from tests.support.oip import Served, serve


@pytest.fixture(scope="module", params=["demo", "credit", "creditcls"])
def served(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    server = serve(bundles, request.param, tmp_path_factory.mktemp("oip"))
    with server.proc:
        server.proc.wait_ready()
        yield server
