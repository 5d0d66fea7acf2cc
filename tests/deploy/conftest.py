"""Fixtures of the deployment tests: a trained demo bundle, a scratch PostgreSQL database,
the parsed Dockerfile, and a process list that is always emptied in teardown."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import DOCKERFILE, REPO, Processes, Stage, parse_dockerfile

# The machine's PostgreSQL (trust auth on loopback, started by .ci/run), as in tests/app/.
# Each session gets a database of its own, so no run sees another's audit records.
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


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


@pytest.fixture(scope="session")
def postgres_audit_url() -> Iterator[str]:
    """SQLAlchemy URL of a fresh database, dropped at the end of the session."""
    import psycopg
    from sqlalchemy.engine import make_url

    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        # Never a skip: the replicas' shared trail is what the load-balancer tests are about.
        pytest.fail(
            f"PostgreSQL at {POSTGRES_ADMIN_URL} is unreachable; start it with: pg_ctlcluster "
            f"--skip-systemctl-redirect $(ls /etc/postgresql) main start\n{exc}"
        )
    name = f"iabma_deploy_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            url = make_url(POSTGRES_ADMIN_URL).set(drivername="postgresql+psycopg", database=name)
            yield url.render_as_string(hide_password=False)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
