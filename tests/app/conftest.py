"""Bundles trained once per session, PostgreSQL, and app harnesses for the serving tests.

Three bundles go into one temporary store: ``demo`` (the paper's simulation, 5 experts,
integer labels), ``credit`` (credit-g regression of ``credit_amount``: 13 categorical
columns, one expert reading only 4 numeric features) and ``creditcls`` (credit-g
classification with string labels). The fitted estimators are the oracles.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.bundles import Bundles, Trained
from tests.support.trail import Trail


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LogisticRegression, Ridge

    from training.datasets import load_shared, simulate
    from training.estimator import IABMAClassifier, IABMARegressor
    from training.experts.defaults import simulation_experts
    from training.experts.spec import Expert
    from training.export.bundle import export_bundle

    store = tmp_path_factory.mktemp("models_store")

    train, test = simulate(1000, 0), simulate(300, 10_000)
    demo = IABMAClassifier(simulation_experts(), random_state=0).fit(train.X, train.y)
    demo_path = export_bundle(demo, store, "demo", test.X)

    data = load_shared("credit-g")
    X = data.X.drop(columns=["credit_amount"]).assign(**{"class": data.y})
    y = data.X["credit_amount"]
    reg_experts = [
        Expert("ridge", Ridge()),
        Expert("forest", RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0)),
        Expert(
            "ridge_num",
            Ridge(alpha=3.0),
            features=("duration", "age", "installment_commitment", "residence_since"),
        ),
    ]
    credit = IABMARegressor(reg_experts, cv=3, random_state=0).fit(X.iloc[:800], y.iloc[:800])
    credit_path = export_bundle(credit, store, "credit", X.iloc[800:])

    cls_experts = [
        Expert("linear", LogisticRegression(max_iter=2000)),
        Expert("forest", RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0)),
    ]
    Xc, yc = data.X, data.y
    creditcls = IABMAClassifier(cls_experts, cv=3, random_state=0).fit(Xc.iloc[:800], yc.iloc[:800])
    cls_path = export_bundle(creditcls, store, "creditcls", Xc.iloc[800:])

    return Bundles(
        store=store,
        demo=Trained("demo", demo, test.X.reset_index(drop=True), demo_path.name),
        credit=Trained("credit", credit, X.iloc[800:].reset_index(drop=True), credit_path.name),
        creditcls=Trained(
            "creditcls", creditcls, Xc.iloc[800:].reset_index(drop=True), cls_path.name
        ),
    )


ODD_NAMES = {
    "checking_status": "checking-status",
    "duration": "duration in months",
    "credit_history": "crédit_历史",
    "purpose": "2nd purpose",
    "credit_amount": "instances",
    "savings_status": "limit",
    "installment_commitment": "rate%/day & more?",
}


@pytest.fixture(scope="session")
def odd_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trained]:
    """credit-g classification under feature names a client may well have: hyphens, spaces,
    unicode, a leading digit, URL-reserved characters, and the words ``instances`` and
    ``limit`` that the routes also use. Small and quick: two experts, 500 rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    from training.datasets import load_shared
    from training.estimator import IABMAClassifier
    from training.experts.spec import Expert
    from training.export.bundle import export_bundle

    store = tmp_path_factory.mktemp("odd_store")
    data = load_shared("credit-g")
    X = data.X[list(ODD_NAMES)].rename(columns=ODD_NAMES)
    experts = [
        Expert("linear", LogisticRegression(max_iter=500)),
        Expert("tree", DecisionTreeClassifier(max_depth=4, random_state=0)),
    ]
    est = IABMAClassifier(experts, cv=3, random_state=0).fit(X.iloc[:500], data.y.iloc[:500])
    path = export_bundle(est, store, "odd", X.iloc[500:600])
    return store, Trained("odd", est, X.iloc[500:600].reset_index(drop=True), path.name)


@pytest.fixture(scope="session")
def odd_regression(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trained]:
    """The same odd names on a regression of ``credit_amount`` (``age`` takes the name
    ``instances``): the answers with a mean, a std and an interval."""
    from sklearn.linear_model import Ridge
    from sklearn.tree import DecisionTreeRegressor

    from training.datasets import load_shared
    from training.estimator import IABMARegressor
    from training.experts.spec import Expert
    from training.export.bundle import export_bundle

    store = tmp_path_factory.mktemp("odd_regression_store")
    data = load_shared("credit-g")
    names = {**ODD_NAMES, "age": "instances"}
    del names["credit_amount"]
    X = data.X[list(names)].rename(columns=names)
    y = data.X["credit_amount"]
    experts = [
        Expert("ridge", Ridge()),
        Expert("tree", DecisionTreeRegressor(max_depth=4, random_state=0)),
    ]
    est = IABMARegressor(experts, cv=3, random_state=0).fit(X.iloc[:500], y.iloc[:500])
    path = export_bundle(est, store, "oddreg", X.iloc[500:600])
    return store, Trained("oddreg", est, X.iloc[500:600].reset_index(drop=True), path.name)


@pytest.fixture
def store_copy(bundles: Bundles, tmp_path: Path) -> Path:
    """A private, writable copy of the store, for tests that publish or tamper."""
    dest = tmp_path / "store"
    shutil.copytree(bundles.store, dest)
    for f in dest.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return dest


@pytest.fixture(params=["sqlite", "postgres"])
def trail(request: pytest.FixtureRequest, tmp_path: Path) -> Trail:
    if request.param == "sqlite":
        file = tmp_path / "trail" / "audit.db"
        return Trail(f"sqlite:///{file}", file)
    return Trail(request.getfixturevalue("pg_url"), None)
