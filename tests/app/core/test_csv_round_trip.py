"""Every row of a training file is accepted by its own served bundle and predicts as in memory.

Rows are sent as a plain CSV-to-JSON reader would send them (empty cells null, numbers as
numbers, every other cell the string itself), to ``POST /predict`` and to the Open
Inference Protocol route, and compared with the in-memory estimator to 1e-5.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression, Ridge

from tests.support.bundles import make_settings
from tests.support.harness import AsgiHarness, UvicornHarness
from training.combiners.iabma_gate import IABMAGate
from training.csvfile import json_rows, read_text_frame
from training.datasets import SHARED, load_csv
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.spec import Expert
from training.export.bundle import export_bundle

BATCH = 1000
TOL = 1e-5


def tiny_estimator(task: str) -> IABMAClassifier | IABMARegressor:
    """Two cheap experts and a short gate search: the rows, not the model, are under test."""
    if task == "classification":
        experts = [
            Expert("linear", LogisticRegression(max_iter=300)),
            Expert("forest", RandomForestClassifier(n_estimators=8, max_depth=4, random_state=0)),
        ]
        cls: Any = IABMAClassifier
    else:
        experts = [
            Expert("linear", Ridge()),
            Expert("forest", RandomForestRegressor(n_estimators=8, max_depth=4, random_state=0)),
        ]
        cls = IABMARegressor
    gate = IABMAGate(kl_weight=0.0, objective="marginal", epochs=4, early_stopping=False)
    return cls(experts, combiner=gate, cv=3, random_state=0)


def fit_and_export(path: Path, target: str, task: str, store: Path, name: str, **kw: Any) -> Any:
    data = load_csv(path, target, task, **kw)
    est = tiny_estimator(task)
    est.set_params(na_values=sorted(data.rule.na_values), keep_default_na=False)
    est.set_params(decimal=data.rule.decimal)
    est.fit(data.X, data.y)
    export_bundle(est, store, name, data.X.head(256))
    return data, est


def reader_rows(path: Path, features: list[str]) -> list[dict[str, Any]]:
    """The feature columns (not the target, nor columns the user dropped) of every row."""
    text, _ = read_text_frame(path)
    return json_rows(text[features])


def _client_number(v: Any) -> float | None:
    """What a v2 client puts in a numeric tensor: the number a cell holds, else null."""
    if isinstance(v, (int, float)):
        return v
    try:
        number = float(v)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def oip_tensors(rows: list[dict[str, Any]], numeric: set[str]) -> list[dict[str, Any]]:
    """One tensor per feature: numbers (null when the cell holds no number) or strings."""
    tensors = []
    for name in rows[0]:
        values = [r[name] for r in rows]
        if name in numeric:
            data = [_client_number(v) for v in values]
            tensors.append({"name": name, "datatype": "FP64", "shape": [len(rows)], "data": data})
        else:
            data = [None if v is None else str(v) for v in values]
            tensors.append({"name": name, "datatype": "BYTES", "shape": [len(rows)], "data": data})
    return tensors


def expected(est: Any, X: pd.DataFrame) -> np.ndarray:
    if isinstance(est, IABMAClassifier):
        return est.predict_proba(X)
    d = est.distribution(X)
    return np.column_stack([d.mean, d.std, d.lower, d.upper])


def served(body: dict[str, Any], task: str) -> np.ndarray:
    if "outputs" in body:
        out = {
            t["name"]: np.asarray(t["data"], dtype=float).reshape(t["shape"])
            for t in body["outputs"]
            if t["name"] != "prediction" or task == "regression"
        }
        if task == "classification":
            return out["probabilities"]
        return np.column_stack([out["prediction"], out["std"], out["interval"]])
    preds = body["predictions"]
    if task == "classification":
        return np.array([list(p["prediction"]["probabilities"].values()) for p in preds])
    return np.array(
        [
            [
                p["prediction"]["mean"],
                p["prediction"]["std"],
                p["prediction"]["interval"]["lower"],
                p["prediction"]["interval"]["upper"],
            ]
            for p in preds
        ]
    )


def replay(
    client: Any, name: str, rows: list[dict[str, Any]], task: str, oip: bool, numeric: set[str]
) -> np.ndarray:
    got = []
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        if oip:
            r = client.post(
                f"/v2/models/{name}/infer", json={"inputs": oip_tensors(chunk, numeric)}
            )
        else:
            r = client.post("/predict", json={"instances": chunk})
        assert r.status_code == 200, f"rows {start}-{start + len(chunk)}: {r.text[:400]}"
        got.append(served(r.json(), task))
    return np.concatenate(got)


def assert_round_trip(client: Any, name: str, path: Path, target: str, data: Any, est: Any) -> None:
    rows = reader_rows(path, est.schema_.names)
    keep = np.asarray(data.source_rows) - 1  # rows whose target was missing were not trained on
    rows = [rows[i] for i in keep]
    numeric = {f.name for f in est.schema_.features if f.dtype == "float"}
    want = expected(est, data.X)
    # Regression is compared in standardised units: the graphs run in float32, so a target
    # in the hundreds (bike) carries float32's relative error, not an absolute 1e-5.
    scale = getattr(est, "y_scale_", 1.0)
    for oip in (False, True):
        got = replay(client, name, rows, data.task, oip, numeric)
        np.testing.assert_allclose(got / scale, want / scale, atol=TOL, rtol=0)


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("round_trip_store")


@pytest.mark.slow
@pytest.mark.parametrize("dataset", sorted(SHARED))
def test_every_row_of_a_shared_dataset_comes_back(
    dataset: str, shared_store: Path, data_dir: Path, tmp_path: Path
) -> None:
    spec = SHARED[dataset]
    path = data_dir / spec.file
    data, est = fit_and_export(path, spec.target, spec.task, shared_store, dataset, drop=spec.drop)
    settings_ = make_settings(shared_store, tmp_path, dataset, audit_enabled=False)
    # One dataset over real HTTP (uvicorn on 127.0.0.1), the others in process.
    harness = UvicornHarness if dataset == "credit-g" else AsgiHarness
    with harness(settings_) as client:
        assert_round_trip(client, dataset, path, spec.target, data, est)


# -- hostile files -----------------------------------------------------------------------
HOSTILE_NAMES = [
    "education-num", "fixed acidity", "a.b", "größe", "1st", "a-b", "a_b", "instances",
    "weights", "request_id", "model", "", " padded ", "名前", "x" * 150, "limit", "experts",
]  # fmt: skip
CATEGORY_CELLS = ["unknown", "?", "NA", "", " x ", "x", "Yes", "yes", "none", "N/A", "1", "02", "é"]


@st.composite
def hostile_csv(draw: st.DrawFn) -> tuple[pd.DataFrame, str]:
    n = 60
    names = draw(st.lists(st.sampled_from(HOSTILE_NAMES), min_size=2, max_size=5, unique=True))
    names = [n_ if n_ != "" else "Unnamed: 0" for n_ in names]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    cols: dict[str, list[str]] = {}
    for name in names:
        kind = draw(st.sampled_from(["number", "number_text", "category", "mixed"]))
        if kind == "category":
            pool = draw(st.lists(st.sampled_from(CATEGORY_CELLS), min_size=2, max_size=6))
            cols[name] = [pool[k] for k in rng.integers(0, len(pool), n)]
        elif kind == "mixed":
            cols[name] = [
                str(round(v, 3)) if k else rng.choice(["NA", "", "?", "unknown"])
                for v, k in zip(rng.normal(size=n), rng.integers(0, 4, n), strict=True)
            ]
        else:
            values = rng.normal(size=n) * 10 ** draw(st.integers(-3, 6))
            fmt = (lambda v: f" {v:.4g} ") if kind == "number_text" else (lambda v: repr(float(v)))
            cells = [fmt(v) for v in values]
            for k in rng.choice(n, 5, replace=False):
                cells[k] = draw(st.sampled_from(["", "NA", "nan", "NULL"]))
            cols[name] = cells
    target = "target class"
    signal = rng.normal(size=n)
    cols[target] = ["yes" if v > 0 else "no" for v in signal]
    return pd.DataFrame(cols), target


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=hostile_csv())
def test_hostile_csvs_serve_every_training_row(
    case: tuple[pd.DataFrame, str], tmp_path: Path
) -> None:
    frame, target = case
    run = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: hypothesis reruns cases
    path = run / "hostile.csv"
    frame.to_csv(path, index=False)
    try:
        data, est = fit_and_export(path, target, "classification", run / "store", "hostile")
    except Exception as exc:  # a CsvError is a legitimate answer for some draws
        from training.errors import IABMAError

        assert isinstance(exc, IABMAError), repr(exc)
        event(f"refused before fitting: {type(exc).__name__}")
        return
    event("trained, exported and replayed")
    with AsgiHarness(make_settings(run / "store", run, "hostile", audit_enabled=False)) as app:
        assert_round_trip(app, "hostile", path, target, data, est)
        meta = app.get("/v2/models/hostile").json()
        assert [i["name"] for i in meta["inputs"]] == [str(c) for c in data.X.columns]
        # Weights for a training row, by the user's names, as query parameters.
        row = reader_rows(path, est.schema_.names)[0]
        params = {k: "" if v is None else str(v) for k, v in row.items()}
        r = app.get("/weights", params=params)
        assert r.status_code == 200, r.text
        want = est.weights(data.X.head(1))[0]
        got = [r.json()["weights"][e] for e in est.expert_names_]
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= TOL
        assert not any(math.isnan(v) for v in got)
