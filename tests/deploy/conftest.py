"""Fixtures of the deployment tests: a trained demo bundle, the parsed Dockerfile, and a
process list that is always emptied in teardown (PostgreSQL comes from tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deploy import DOCKERFILE, REPO, Processes, Stage, parse_dockerfile


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the simulation demo bundle (about 5 s to train)."""
    store = tmp_path_factory.mktemp("deploy-store")
    res = subprocess.run(
        [sys.executable, "-m", "training.cli", "train", "--dataset", "simulation",
         "--store", str(store), "--name", "demo", "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return store


@pytest.fixture(scope="session")
def dockerfile() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture()
def procs(tmp_path: Path) -> Iterator[Processes]:
    manager = Processes(tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()


@pytest.fixture(scope="module")
def module_procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    manager = Processes(tmp_path_factory.mktemp("procs"))
    try:
        yield manager
    finally:
        manager.stop_all()
