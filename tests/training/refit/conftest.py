"""A simulation bundle served with outcomes drawn from its ``lda`` expert: full inputs in
one trail, hashed inputs in another; and versions of it with other gates. Built once per
session; each test copies the store."""

from __future__ import annotations

import copy
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
# An IA-BMA gate trained with settings other than the defaults, and fixed, so no search.
FIXED_IABMA = {
    "kl_weight": 0.3,
    "objective": "elbo",
    "prior_temperature": 4.0,
    "early_stopping": False,
    "temperature": None,
    "epochs": 5,
    "hidden_layer_sizes": [16, 8],
}


@dataclass(frozen=True)
class World:
    store: Path  # the trained bundle, never written by a test
    version: str
    full_url: str  # the trail with the inputs (IABMA_AUDIT_PAYLOAD=full)
    hash_url: str  # the trail with their keyed hash only
    hash_sent: dict[str, list[dict[str, Any]]]  # its requests' instances, as sent


@dataclass(frozen=True)
class Gates:
    """The world's experts under other gates: versions staged beside the world's."""

    store: Path  # never written by a test
    fixed: str  # IA-BMA with FIXED_IABMA
    stacking: str  # stacking's pool


@pytest.fixture(scope="session")
def trained() -> Any:
    """The world's estimator: the paper's five experts on 1000 simulated rows."""
    from training.datasets import simulate
    from training.estimator import IABMAClassifier
    from training.experts.defaults import simulation_experts

    train = simulate(1000, 0)
    return IABMAClassifier(simulation_experts(), random_state=0).fit(train.X, train.y)


@pytest.fixture(scope="session")
def world(trained: Any, tmp_path_factory: pytest.TempPathFactory) -> World:
    from training.datasets import simulate
    from training.export.bundle import export_bundle

    root = tmp_path_factory.mktemp("refit_world")
    store = root / "store"
    path = export_bundle(trained, store, "demo", simulate(300, 10_000).X)
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


@pytest.fixture(scope="session")
def gates(trained: Any, world: World, tmp_path_factory: pytest.TempPathFactory) -> Gates:
    from training.combiners.iabma_gate import IABMAGate
    from training.datasets import simulate
    from training.export.bundle import export_bundle

    store = Path(shutil.copytree(world.store, tmp_path_factory.mktemp("refit_gates") / "store"))
    train = simulate(1000, 0)
    names = []
    for combiner in (IABMAGate(**FIXED_IABMA), "stacking"):
        est = copy.deepcopy(trained)
        est.combiner = combiner
        Z = est.gate_inputs(est.features(train.X))[est.experts_.evidence_rows_]
        est.fit_gate(Z, est.evidence_)
        path = export_bundle(est, store, "demo", simulate(300, 10_000).X, publish=False)
        names.append(path.name)
    return Gates(store, *names)


@pytest.fixture
def store(world: World, tmp_path: Path) -> Path:
    """A copy of the world's store for one test to write versions into."""
    return Path(shutil.copytree(world.store, tmp_path / "store"))
