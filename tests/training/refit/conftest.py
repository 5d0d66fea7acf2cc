"""A simulation bundle served with outcomes drawn from its ``lda`` expert: full inputs in
one trail, hashed inputs in another. Built once per session; each test copies the store."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.bundles import instances
from tests.support.outcomes import drawn_from, serve_with_outcomes

TRUTH = "lda"  # the expert the outcomes follow; the trained gate gives it almost no weight
PER_REQUEST = 50  # rows per request: 40 requests in the full trail, 12 in the hashed one


@dataclass(frozen=True)
class World:
    store: Path  # the trained bundle, never written by a test
    version: str
    full_url: str  # the trail with the inputs (IABMA_AUDIT_PAYLOAD=full)
    hash_url: str  # the trail with their keyed hash only
    hash_sent: dict[str, list[dict[str, Any]]]  # its requests' instances, as sent


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    from training.datasets import simulate
    from training.estimator import IABMAClassifier
    from training.experts.defaults import simulation_experts
    from training.export.bundle import export_bundle

    root = tmp_path_factory.mktemp("refit_world")
    store = root / "store"
    est = IABMAClassifier(simulation_experts(), random_state=0).fit(*_xy(simulate(1000, 0)))
    path = export_bundle(est, store, "demo", simulate(300, 10_000).X)
    full, hashed = root / "full", root / "hash"
    rng = np.random.default_rng(0)
    rows = instances(simulate(2000, 7).X)
    label = drawn_from(TRUTH, rng)
    serve_with_outcomes(store, full, rows, label, audit_payload="full", per_request=PER_REQUEST)
    sent = serve_with_outcomes(
        store, hashed, rows[:600], label, audit_payload="hash", prefix="h", per_request=PER_REQUEST
    )
    return World(
        store, path.name, f"sqlite:///{full / 'audit.db'}", f"sqlite:///{hashed / 'audit.db'}", sent
    )


def _xy(data: Any) -> tuple[Any, Any]:
    return data.X, data.y


@pytest.fixture
def store(world: World, tmp_path: Path) -> Path:
    """A copy of the world's store for one test to write versions into."""
    return Path(shutil.copytree(world.store, tmp_path / "store"))
