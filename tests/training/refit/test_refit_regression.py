"""``iabma refit`` of a regression bundle: outcomes are numbers in the target's units."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import Ridge

from app.bundle.loader import open_bundle
from app.bundle.pointer import current
from app.cli.main import main
from tests.support.bundles import instances
from tests.support.outcomes import serve_with_outcomes
from training.datasets import load_sklearn
from training.estimator import IABMARegressor
from training.experts.spec import Expert
from training.export.bundle import export_bundle


def test_a_regression_gate_refits_on_numeric_outcomes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = load_sklearn("diabetes")
    X, y = data.X, data.y
    experts = [
        Expert("ridge", Ridge()),
        Expert("forest", RandomForestRegressor(n_estimators=20, max_depth=5, random_state=0)),
    ]
    est = IABMARegressor(experts, cv=3, random_state=0).fit(X.iloc[:200], y.iloc[:200])
    source = export_bundle(est, tmp_path / "store", "reg", X.iloc[200:])
    truth = iter(y.iloc[200:].tolist())
    serve_with_outcomes(
        tmp_path / "store", tmp_path, instances(X.iloc[200:]), lambda _item: next(truth),
        name="reg", audit_payload="full", per_request=50,
    )  # fmt: skip
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    code = main(["refit", "--quiet", "--store", str(tmp_path / "store"), "--name", "reg",
                 "--audit-url", url])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert current(tmp_path / "store" / "reg") == source.name
    (new,) = [
        p for p in (tmp_path / "store" / "reg").iterdir() if p.name[0].isdigit() and p != source
    ]
    manifest = open_bundle(new).manifest  # verifies every checksum and graph
    refit = manifest.training["refit"]
    assert refit["rows"] == len(X) - 200 and refit["old_nll"] > 0 and refit["new_nll"] > 0
    assert [e.sigma for e in manifest.experts] == [
        e.sigma for e in open_bundle(source).manifest.experts
    ]
    for e in manifest.experts:
        assert (new / e.file).read_bytes() == (source / e.file).read_bytes()
    assert "rmse" in manifest.metrics["iabma"] and "rmse" in manifest.metrics["served gate"]
    assert json.loads((new / "manifest.json").read_text())["version"] == new.name
    assert f"{refit['new_nll']:.4f}" in out
