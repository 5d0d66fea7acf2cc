"""Shared, seeded fixtures: small real datasets and estimators fitted once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.fail(f"the shared datasets are missing: expected them in {DATA_DIR}")
    return DATA_DIR
