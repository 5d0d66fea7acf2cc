"""Real uvicorn processes serving the session's bundles, one per module and bundle."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.bundles import Bundles
from tests.support.harness import UvicornProcess

Serve = Callable[..., UvicornProcess]


@pytest.fixture(scope="module")
def serve(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """``serve(name, **env)``: a ready uvicorn serving bundle ``name`` with its own SQLite
    trail; every server started is stopped with the module."""
    started: list[UvicornProcess] = []

    def start(name: str = "demo", **env: str) -> UvicornProcess:
        audit: Path = tmp_path_factory.mktemp("audit") / "audit.db"
        full = {
            "IABMA_STORE": str(bundles.store),
            "IABMA_MODEL_NAME": name,
            "IABMA_AUDIT_URL": f"sqlite:///{audit}",
            "IABMA_LOG_LEVEL": "WARNING",
            **env,
        }
        served = UvicornProcess(full)
        started.append(served)
        served.__enter__()
        served.wait_ready()
        return served

    yield start
    for served in started:
        served.__exit__(None, None, None)


@pytest.fixture(scope="module")
def demo_url(serve: Serve) -> str:
    return serve("demo").base_url


@pytest.fixture(scope="module")
def credit_url(serve: Serve) -> str:
    return serve("credit").base_url
