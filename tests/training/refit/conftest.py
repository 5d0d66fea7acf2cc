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


# -- a regression bundle of three experts, for adding and retiring one ------------------------
REG_FIT = 150  # the bundle learns from diabetes' first rows; the rest are served
REG_PER_REQUEST = 20
FEEDER, OTHER = "feeder-key-0123456789", "other-feeder-key-98765"
ADDED_COLUMNS = ["age", "bmi", "bp", "s5"]  # the added model reads some of the features


@dataclass(frozen=True)
class RegWorld:
    store: Path  # never written by a test
    version: str
    full_url: str  # inputs kept; outcomes posted by FEEDER, every fifth request by OTHER
    hash_url: str  # only the inputs' keyed hash
    sent: dict[str, list[dict[str, Any]]]  # each request's instances, as sent (both trails)
    y: list[float]  # the served rows' outcomes, in the order served
    added: Path  # a team's model trained elsewhere: ONNX, one (n, 1) input per column read
    added_model: Any  # the same model, fitted, to compare the served means with


def _serve_posted(
    store: Path, trail: Path, rows: list[dict[str, Any]], y: list[float], payload: str
) -> dict[str, list[dict[str, Any]]]:
    """Serve ``rows`` and post their outcomes, each request's under FEEDER's key but every
    fifth one's under OTHER's; return each request's instances by id."""
    from tests.support.bundles import make_settings
    from tests.support.harness import AsgiHarness

    sent: dict[str, list[dict[str, Any]]] = {}
    settings = make_settings(
        store, trail, "reg", audit_payload=payload, feedback_keys=f"{FEEDER},{OTHER}"
    )
    with AsgiHarness(settings) as app:
        for k in range(0, len(rows), REG_PER_REQUEST):
            rid = f"q{k // REG_PER_REQUEST}"
            batch = rows[k : k + REG_PER_REQUEST]
            r = app.post("/predict", json={"instances": batch}, headers={"X-Request-ID": rid})
            assert r.status_code == 200, r.text
            outcomes = [
                {"request_id": rid, "row": i, "outcome": y[k + i]} for i in range(len(batch))
            ]
            key = OTHER if (k // REG_PER_REQUEST) % 5 == 2 else FEEDER
            r = app.post(
                "/feedback", json={"outcomes": outcomes}, headers={"Authorization": f"Bearer {key}"}
            )
            assert r.status_code == 200, r.text
            sent[rid] = batch
    return sent


@pytest.fixture(scope="session")
def reg_world(tmp_path_factory: pytest.TempPathFactory) -> RegWorld:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    from sklearn.linear_model import Ridge
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import Pipeline

    from training.datasets import load_sklearn
    from training.estimator import IABMARegressor
    from training.experts.spec import Expert
    from training.export.bundle import export_bundle

    root = tmp_path_factory.mktemp("refit_reg")
    data = load_sklearn("diabetes")
    X, y = data.X, data.y
    experts = [
        Expert("ridge", Ridge()),
        Expert("forest", RandomForestRegressor(n_estimators=20, max_depth=5, random_state=0)),
        Expert("knn", KNeighborsRegressor(n_neighbors=15)),
    ]
    est = IABMARegressor(experts, cv=3, random_state=0).fit(X.iloc[:REG_FIT], y.iloc[:REG_FIT])
    path = export_bundle(est, root / "store", "reg", X.iloc[REG_FIT:])
    rows, served_y = instances(X.iloc[REG_FIT:]), y.iloc[REG_FIT:].tolist()
    sent = _serve_posted(root / "store", root / "full", rows, served_y, "full")
    _serve_posted(root / "store", root / "hash", rows, served_y, "hash")

    keep = ColumnTransformer([("keep", "passthrough", ADDED_COLUMNS)])
    gbm = GradientBoostingRegressor(n_estimators=50, random_state=0)
    model = Pipeline([("columns", keep), ("gbm", gbm)]).fit(X.iloc[:REG_FIT], y.iloc[:REG_FIT])
    onx = convert_sklearn(
        model, initial_types=[(c, FloatTensorType([None, 1])) for c in ADDED_COLUMNS]
    )
    added = root / "gbm.onnx"
    added.write_bytes(onx.SerializeToString())
    return RegWorld(
        root / "store", path.name, f"sqlite:///{root / 'full' / 'audit.db'}",
        f"sqlite:///{root / 'hash' / 'audit.db'}", sent, served_y, added, model,
    )  # fmt: skip


@pytest.fixture
def reg_store(reg_world: RegWorld, tmp_path: Path) -> Path:
    """A copy of the regression world's store for one test to write versions into."""
    return Path(shutil.copytree(reg_world.store, tmp_path / "store"))
