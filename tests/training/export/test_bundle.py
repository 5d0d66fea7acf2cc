"""Bundles: ONNX parity with the in-memory estimator, layout, LATEST, and tampering."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from app.bundle.loader import BundleError, open_bundle, read_manifest, resolve_version
from app.bundle.predictor import BundlePredictor
from app.bundle.weight_bins import WEIGHT_EDGES, weight_counts
from training.errors import ParameterError
from training.export.bundle import export_bundle

PARITY = 1e-5


@pytest.fixture(scope="module")
def credit_bundle(credit_fit, tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("store")
    return export_bundle(credit_fit.est, store, "credit", credit_fit.test.X, target_name="class")


@pytest.fixture(scope="module")
def california_bundle(california_fit, tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("store")
    return export_bundle(california_fit.est, store, "cal", california_fit.test.X)


def test_classification_parity_with_categorical_columns(credit_fit, credit_bundle) -> None:
    est, X = credit_fit.est, credit_fit.test.X
    assert est.schema_.categorical, "credit-g must exercise string columns"
    pred = BundlePredictor(open_bundle(credit_bundle)).predict(est.columns(X))
    assert np.abs(pred.weights - est.weights(X)).max() <= PARITY
    assert np.abs(pred.proba - est.predict_proba(X)).max() <= PARITY


def test_regression_parity(california_fit, california_bundle) -> None:
    est, X = california_fit.est, california_fit.test.X
    predictor = BundlePredictor(open_bundle(california_bundle))
    pred = predictor.predict(est.columns(X))
    want = est.distribution(X)
    assert np.abs(pred.weights - est.weights(X)).max() <= PARITY
    served = {"mean": pred.mean, "std": pred.std, "lower": pred.interval[:, 0],
              "upper": pred.interval[:, 1]}  # fmt: skip
    for field, value in served.items():
        diff = np.abs(value - getattr(want, field)).max()
        assert diff <= PARITY, (field, diff)


def test_layout_manifest_and_latest(credit_fit, credit_bundle) -> None:
    root = credit_bundle.parent
    assert (root / "LATEST").read_text().strip() == credit_bundle.name
    assert resolve_version(root.parent, "credit") == credit_bundle
    m = read_manifest(credit_bundle)
    assert m.task == "classification" and m.target.classes == ["bad", "good"]
    assert [e.name for e in m.experts] == credit_fit.est.expert_names_
    assert m.gate.combiner == "iabma" and m.gate.prior is not None
    assert m.data_fingerprint == credit_fit.est.data_fingerprint_
    assert {"numpy", "onnxruntime", "torch", "scikit-learn"} <= set(m.library_versions)
    for entry in m.experts:
        f = credit_bundle / entry.file
        assert (f.is_file() and not os.access(f, os.W_OK)) or os.geteuid() == 0
    assert not list(root.glob(".tmp-*")), "no temporary directory may be left behind"


def test_a_new_export_is_a_new_version(credit_fit, credit_bundle) -> None:
    store = credit_bundle.parent.parent
    second = export_bundle(credit_fit.est, store, "credit", credit_fit.test.X, version="v2")
    assert second.name == "v2" and resolve_version(store, "credit") == second
    assert resolve_version(store, "credit", credit_bundle.name) == credit_bundle
    with pytest.raises(ParameterError, match="version='v2' already exists"):
        export_bundle(credit_fit.est, store, "credit", credit_fit.test.X, version="v2")


@pytest.fixture()
def copy_of(tmp_path):
    def make(bundle: Path) -> Path:
        import shutil

        # Under its own version's name: a manifest naming another directory is refused.
        dst = tmp_path / "store" / "m" / bundle.name
        shutil.copytree(bundle, dst)
        for f in dst.rglob("*"):
            f.chmod(0o644 if f.is_file() else 0o755)
        (dst.parent / "LATEST").write_text(bundle.name + "\n")
        return dst

    return make


def test_a_changed_file_is_refused(credit_bundle, copy_of) -> None:
    b = copy_of(credit_bundle)
    with (b / "experts" / "knn.onnx").open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(BundleError, match=r"experts/knn.onnx has sha256 .* refusing a modified"):
        open_bundle(b)


def test_a_swapped_gate_is_refused(credit_bundle, california_bundle, copy_of) -> None:
    b = copy_of(credit_bundle)
    (b / "gate.onnx").write_bytes((california_bundle / "gate.onnx").read_bytes())
    with pytest.raises(BundleError, match="gate.onnx has sha256"):
        open_bundle(b)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(schema_version=1), "schema_version 1;.*Re-export the bundle"),
        (lambda m: m.update(schema_version=99), "schema_version 99;.*Upgrade the server"),
        (lambda m: m.update(schema_version="2"), "schema_version"),
        (lambda m: m.update(surprise=True), "surprise: Extra inputs are not permitted"),
        (lambda m: m.pop("experts"), "experts: Field required"),
        (lambda m: m["experts"].pop(), "the prior baseline needs one value per expert"),
        (
            lambda m: (m["experts"].pop(), m["gate"].update(prior=None, weight_histogram=None)),
            "gate outputs 4 weights",
        ),
        (lambda m: m["gate"]["weight_histogram"]["counts"].pop("knn"), "one count list per"),
        (lambda m: m["gate"]["weight_histogram"].update(edges=[0, 0.5, 1]), "one count per bin"),
        (lambda m: m["experts"][0].update(file="../../etc/passwd"), "relative path inside"),
        (lambda m: m["gate"].update(sha256="XYZ"), "sha256 must be 64 lowercase hex"),
    ],
)
def test_a_bad_manifest_is_refused(credit_bundle, copy_of, edit, message) -> None:
    b = copy_of(credit_bundle)
    data = json.loads((b / "manifest.json").read_text())
    edit(data)
    (b / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=message):
        open_bundle(b)


def test_the_gate_weight_histogram_counts_the_training_rows(credit_fit, credit_bundle) -> None:
    est, X = credit_fit.est, credit_fit.train.X
    h = read_manifest(credit_bundle).gate.weight_histogram
    assert h is not None and h.edges == list(WEIGHT_EDGES)
    assert h.rows == len(X)
    want = weight_counts(est.weights(X))
    for name, counts in zip(est.expert_names_, want, strict=True):
        assert np.abs(np.array(h.counts[name]) - counts).sum() <= 2, name  # ties at an edge


def test_a_version_3_bundle_serves_without_a_histogram(credit_bundle, copy_of) -> None:
    b = copy_of(credit_bundle)
    data = json.loads((b / "manifest.json").read_text())
    data["schema_version"] = 3
    del data["gate"]["weight_histogram"]
    (b / "manifest.json").write_text(json.dumps(data))
    assert open_bundle(b).manifest.gate.weight_histogram is None


def test_unparseable_or_missing_pieces_are_refused(credit_bundle, copy_of) -> None:
    b = copy_of(credit_bundle)
    (b / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="is not valid JSON"):
        open_bundle(b)
    (b / "manifest.json").unlink()
    with pytest.raises(BundleError, match="manifest.json is missing"):
        open_bundle(b)
    (b.parent / "LATEST").write_text("v9\n")
    with pytest.raises(BundleError, match="version 'v9' of 'm' does not exist"):
        resolve_version(b.parent.parent, "m")
    (b.parent / "LATEST").write_text("../../x\n")
    with pytest.raises(BundleError, match="version in"):
        resolve_version(b.parent.parent, "m")
    with pytest.raises(BundleError, match="no bundle named 'nope'"):
        resolve_version(b.parent.parent, "nope")


@pytest.mark.parametrize(
    "combiner", ["best_single", "accuracy_weighted", "bma", "moe", "dla", "smc", "bhs", "uniform"]
)
def test_every_baseline_can_be_the_bundle_gate(combiner, simulation_fit, tmp_path) -> None:
    """``iabma train --combiner NAME``: the served weights are that combiner's weights."""
    from training.estimator import IABMAClassifier

    train, test = simulation_fit.train, simulation_fit.test
    est = IABMAClassifier(simulation_fit.est.experts, combiner=combiner).fit(train.X, train.y)
    assert est.combiner_.name == combiner
    path = export_bundle(est, tmp_path, "sim", test.X)
    m = read_manifest(path)
    assert m.gate.combiner == combiner and m.gate.prior is None
    pred = BundlePredictor(open_bundle(path)).predict(est.columns(test.X))
    assert np.abs(pred.weights - est.weights(test.X)).max() <= PARITY
    assert np.abs(pred.proba - est.predict_proba(test.X)).max() <= PARITY
