"""Shared, seeded fixtures: small real datasets and estimators fitted once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import fresh_schema, require_postgres

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.fail(f"the shared datasets are missing: expected them in {DATA_DIR}")
    return DATA_DIR


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
