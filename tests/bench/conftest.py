"""A demo bundle store for the benchmarks' quick modes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_store(tmp_path: Path) -> Path:
    """A store holding the demo bundle, trained on the paper's simulation."""
    store = tmp_path / "store"
    iabma = Path(sys.executable).parent / "iabma"
    subprocess.run(
        [str(iabma), "train", "--dataset", "simulation", "--store", str(store), "--name", "demo",
         "--quiet"],
        cwd=REPO, check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    return store


@pytest.fixture
def wrk() -> str:
    """wrk's path: the loads need it, and its absence fails rather than skips."""
    path = shutil.which("wrk")
    if path is None:
        pytest.fail("wrk is missing; `make sysdeps` (run by `make test`) installs it")
    return path
