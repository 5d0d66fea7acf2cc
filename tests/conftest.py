"""Shared, seeded fixtures: small real datasets and estimators fitted once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import fresh_schema, require_postgres
from training.datasets import default_data_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared CSVs: ``IABMA_DATA_DIR``, else ``shared/datasets`` beside the repository."""
    found = default_data_dir()
    if not found.is_dir():
        pytest.fail(f"the shared datasets are missing: expected them in {found}")
    return found


@pytest.fixture(scope="session")
def pg_server() -> None:
    require_postgres()


@pytest.fixture
def pg_url(pg_server: None) -> Iterator[str]:
    """An audit URL on a fresh PostgreSQL schema, dropped after the test."""
    with fresh_schema() as url:
        yield url


@pytest.fixture(scope="session")
def pg_session_url(pg_server: None) -> Iterator[str]:
    """An audit URL on a fresh PostgreSQL schema shared by a whole session's tests."""
    with fresh_schema("iabma_session") as url:
        yield url
