"""``iabma train --experts`` for a classifier: credit-g's team (tests/support/team_models.py)
saved as files, XGBoost's class order declared in experts.toml with ``classes``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
import skops.io as sio

from app.bundle.loader import open_bundle, resolve_version
from app.cli.main import main
from tests.support.bundles import instances, make_settings
from tests.support.harness import AsgiHarness
from tests.support.team_models import classification_team
from training.experts.tolerance import n_terms, parity_tolerance


def test_a_classifier_team_trains_from_experts_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team = classification_team(tmp_path)
    sio.dump(team.pipeline, tmp_path / "logistic.skops")
    team.xgb.save_model(tmp_path / "xgb.json")
    recent = pd.concat([team.split.X_recent, team.split.y_recent.rename("class")], axis=1)
    recent.to_csv(tmp_path / "recent.csv", index=False)
    features = ", ".join(f'"{c}"' for c in team.forest_features)
    (tmp_path / "experts.toml").write_text(
        '[[experts]]\nname = "pipeline"\nsource = "logistic.skops"\n\n'
        '[[experts]]\nname = "xgb"\nsource = "xgb.json"\nclasses = ["bad", "good"]\n\n'
        f'[[experts]]\nname = "forest"\nsource = "forest.onnx"\nfeatures = [{features}]\n',
        encoding="utf-8",
    )
    args = ["train", "--csv", str(tmp_path / "recent.csv"), "--target", "class"]
    args += ["--task", "classification", "--experts", str(tmp_path / "experts.toml")]
    code = main([*args, "--store", str(tmp_path / "store"), "--name", "team", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "  pipeline " in out and "  xgb " in out and "  forest " in out
    path = resolve_version(tmp_path / "store", "team")
    manifest = open_bundle(path).manifest
    assert [e.source.format for e in manifest.experts if e.source] == [
        "skops",
        "xgboost-json",
        "onnx",
    ]
    X = team.split.X_test.head(40)
    with AsgiHarness(make_settings(tmp_path / "store", tmp_path / "audit", name="team")) as app:
        r = app.post("/predict", json={"instances": instances(X)})
    assert r.status_code == 200, r.text
    own = team.own_predictions(X)
    for e in manifest.experts:
        got = np.array(
            [
                [it["experts"][e.name]["probabilities"][c] for c in ("bad", "good")]
                for it in r.json()["predictions"]
            ]
        )
        terms = n_terms(onnx.load(str(path / e.file)))
        assert np.abs(got - own[e.name]).max() <= parity_tolerance(own[e.name], terms), e.name
