"""``iabma refit --add-expert NAME=SOURCE`` takes what an experts.toml takes: an XGBoost
JSON file and a skops pipeline join a served bundle, converted and checked, and serve the
team's own predictions; a pickle needs ``--trust-pickle``."""

from __future__ import annotations

from pathlib import Path

import joblib
import numpy as np
import onnx
import pandas as pd
import pytest

from app.bundle.loader import open_bundle
from tests.training.refit.conftest import REG_FIT, RegWorld
from tests.training.refit.test_refit_experts import common, refit, serve, staged
from training.experts.tolerance import n_terms, parity_tolerance


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two models a team trained on the served bundle's training rows, saved as it would."""
    import skops.io as sio
    import xgboost as xgb
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from training.datasets import load_sklearn

    folder = tmp_path_factory.mktemp("team")
    data = load_sklearn("diabetes")
    X, y = data.X.iloc[:REG_FIT], data.y.iloc[:REG_FIT]
    booster = xgb.XGBRegressor(n_estimators=30, max_depth=3, random_state=0).fit(X, y)
    booster.save_model(folder / "xgb.json")
    ridge = make_pipeline(StandardScaler(), Ridge(alpha=2.0)).fit(X, y)
    sio.dump(ridge, folder / "ridge.skops")
    joblib.dump(ridge, folder / "ridge.joblib")
    return {"folder": folder, "xgb": booster, "ridge": ridge}


def test_an_xgboost_file_and_a_skops_pipeline_join_and_serve_their_own_predictions(
    reg_world: RegWorld,
    reg_store: Path,
    team: dict[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = team["folder"]
    assert isinstance(folder, Path)
    code, _, err = refit(
        capsys, *common(reg_world, reg_store),
        "--add-expert", f"xgb={folder / 'xgb.json'}",
        "--add-expert", f"team_ridge={folder / 'ridge.skops'}",
    )  # fmt: skip
    assert code == 0, err
    new = staged(reg_store, reg_world.version)
    manifest = open_bundle(new).manifest
    assert manifest.expert_names == ["ridge", "forest", "knn", "xgb", "team_ridge"]
    added = manifest.training["refit"]["experts_added"]
    assert [a["format"] for a in added] == ["xgboost-json", "skops"]
    rows = reg_world.sent["q0"][:8]
    answer = serve(reg_store, new.name, tmp_path, rows)
    fed = pd.DataFrame(rows).astype(np.float32).astype(np.float64)
    for name, model in (("xgb", team["xgb"]), ("team_ridge", team["ridge"])):
        want = model.predict(fed)  # type: ignore[attr-defined]
        got = np.array([item["experts"][name]["mean"] for item in answer["predictions"]])
        (entry,) = [e for e in manifest.experts if e.name == name]
        tol = parity_tolerance(want, n_terms(onnx.load(str(new / entry.file))))
        assert np.abs(got - want).max() <= tol, name


def test_a_pickle_needs_trust_pickle(
    reg_world: RegWorld,
    reg_store: Path,
    team: dict[str, object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = team["folder"]
    assert isinstance(folder, Path)
    source = f"r={folder / 'ridge.joblib'}"
    code, _, err = refit(capsys, *common(reg_world, reg_store), "--add-expert", source)
    assert code == 2 and err.count("\n") == 1, err
    assert "--add-expert=" in err and "--trust-pickle" in err
    before = sorted(p.name for p in (reg_store / "reg").iterdir())
    code, _, err = refit(
        capsys, *common(reg_world, reg_store), "--add-expert", source, "--trust-pickle"
    )
    assert code == 0, err
    assert len(sorted(p.name for p in (reg_store / "reg").iterdir())) == len(before) + 1
