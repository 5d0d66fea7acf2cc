"""``iabma train --experts``: the options' faults, and --mlflow-log read back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest

from app.bundle.loader import open_bundle, resolve_version
from app.cli.main import main
from tests.support.bundles import instances, make_settings
from tests.support.harness import AsgiHarness
from tests.support.team_files import TARGET, TeamFiles
from tests.support.team_mlflow import register_team_models, tracking_env
from training.experts.tolerance import n_terms, parity_tolerance

COLUMNS = '["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]'
# The team's files, in four formats, as experts.toml names them (issue 42).
TEAM_FILES = f"""
[[experts]]
name = "ridge"
source = "ridge.skops"

[[experts]]
name = "xgb"
source = "xgb_model.json"

[[experts]]
name = "forest"
source = "rf.onnx"
features = {COLUMNS}

[[experts]]
name = "lgb"
source = "lgb.txt"
"""
THREE_REGISTERED = f"""
[[experts]]
name = "ridge"
source = "models:/ridge@champion"

[[experts]]
name = "xgb"
source = "models:/xgb/1"

[[experts]]
name = "forest"
source = "models:/forest@champion"
features = {COLUMNS}
"""
OWN = {"ridge": "ridge.skops", "xgb": "xgb_model.json", "forest": "rf.onnx", "lgb": "lgb.txt"}


def train(team: TeamFiles, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--csv",
        str(team.recent_csv),
        "--target",
        "y",
        "--task",
        "regression",
        "--store",
        str(tmp_path / "store"),
        "--name",
        "team",
        "--quiet",
        *extra,
    ]


def toml(tmp_path: Path, team: TeamFiles, body: str) -> str:
    path = tmp_path / "experts.toml"
    path.write_text(body.replace("{dir}", team.folder.as_posix()), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("body", "extra", "problem"),
    [
        (
            '[[experts]]\nname = "r"\nsource = "{dir}/ridge.skops"\nsorce = 1\n',
            [],
            "expert 'r': unknown key 'sorce'",
        ),
        (
            '[[experts]]\nname = "r"\nsource = "{dir}/nothere.skops"\n',
            [],
            "expert 'r': source='{dir}/nothere.skops' is not an existing file",
        ),
        (
            '[[experts]]\nname = "r"\nsource = "{dir}/ridge.joblib"\n',
            [],
            "source='{dir}/ridge.joblib' is a pickle, and loading a pickle runs whatever code",
        ),
        (
            '[[experts]]\nname = "linear"\nsource = "{dir}/ridge.skops"\n',
            ["--with-default-experts"],
            "names ['linear'] like default experts",
        ),
        (
            '[[experts]]\nname = "r"\nsource = "models:/absent/1"\n',
            [],
            "source='models:/absent/1' cannot be resolved by MLflow",
        ),
        (None, ["--trust-pickle"], "--trust-pickle=True applies only with --experts"),
        (None, ["--with-default-experts"], "--with-default-experts=True applies only with"),
    ],
)
def test_a_bad_experts_option_is_one_line_and_exit_2(
    team: TeamFiles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: str | None,
    extra: list[str],
    problem: str,
) -> None:
    args = [] if body is None else ["--experts", toml(tmp_path, team, body)]
    with tracking_env((tmp_path / "mlruns").as_uri()):
        code = main(train(team, tmp_path, *args, *extra))
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("iabma train: error: ") and err.count("\n") == 1, err
    assert problem.replace("{dir}", team.folder.as_posix()) in err
    assert not (tmp_path / "store").exists()


def test_the_command_line_shows_no_traceback(team: TeamFiles, tmp_path: Path) -> None:
    path = toml(tmp_path, team, '[[experts]]\nname = "x"\nsource = "{dir}/recent.csv"\n')
    res = subprocess.run(
        [sys.executable, "-m", "training.cli", *train(team, tmp_path, "--experts", path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "has an unknown suffix '.csv'" in res.stderr


def check_served(team: TeamFiles, store: Path, tmp_path: Path) -> None:
    """Served expert means are the team's own predictions, to the parity tolerance."""
    X = pd.read_csv(team.recent_csv).drop(columns=TARGET).head(40)
    with AsgiHarness(make_settings(store, tmp_path / "audit", name="team")) as app:
        r = app.post("/predict", json={"instances": instances(X)})
    assert r.status_code == 200, r.text
    items = r.json()["predictions"]
    path = resolve_version(store, "team")
    for e in open_bundle(path).manifest.experts:
        got = np.array([it["experts"][e.name]["mean"] for it in items])
        # The graphs read float32. LightGBM splits on double thresholds, so its own
        # prediction on the float64 row can differ where a value sits within float32
        # rounding of a split (here 1 row of 40, 3.4 target units): compare on the rows
        # the bundle is fed.
        fed = X.astype(np.float32)
        want = team.models[OWN[e.name]].predict(
            fed.to_numpy() if e.name == "forest" else fed.astype(np.float64)
        )
        terms = n_terms(onnx.load(str(path / e.file)))
        assert np.abs(got - want).max() <= parity_tolerance(want, terms), e.name


def test_train_combines_four_files_named_in_experts_toml(
    team: TeamFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (team.folder / "team.toml").write_text(TEAM_FILES, encoding="utf-8")
    code = main(train(team, tmp_path, "--experts", str(team.folder / "team.toml")))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "4 experts" in out and "(experts converted, not refit," in out
    for name in ("iabma", "uniform", "  ridge", "  xgb", "  forest", "  lgb"):
        assert f"\n{name} " in out, name
    manifest = open_bundle(resolve_version(tmp_path / "store", "team")).manifest
    assert [e.prefit for e in manifest.experts] == [True] * 4
    assert [e.source.format for e in manifest.experts if e.source] == [
        "skops",
        "xgboost-json",
        "onnx",
        "lightgbm",
    ]
    assert manifest.training["experts_file"] == str(team.folder / "team.toml")
    assert set(manifest.experts[0].metrics) >= {"rmse", "nll"}
    check_served(team, tmp_path / "store", tmp_path)


def test_train_reads_mlflow_models_and_logs_the_bundle_back(
    team: TeamFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow import MlflowClient
    from mlflow.artifacts import download_artifacts

    path = tmp_path / "registered.toml"
    path.write_text(THREE_REGISTERED, encoding="utf-8")
    with tracking_env((tmp_path / "mlruns").as_uri()):
        register_team_models(team)
        code = main(train(team, tmp_path, "--experts", str(path), "--mlflow-log"))
        out = capsys.readouterr().out
        assert code == 0, out
        run_id = out.split("logged the bundle as MLflow run ")[1].split()[0]
        run = MlflowClient().get_run(run_id)
        manifest = open_bundle(resolve_version(tmp_path / "store", "team")).manifest
        assert run.data.params["bundle"] == "team"
        assert run.data.params["version"] == manifest.version
        assert run.data.params["experts"] == ",".join(e.name for e in manifest.experts)
        assert run.data.metrics["iabma.nll"] == pytest.approx(manifest.metrics["iabma"]["nll"])
        first = manifest.experts[0]
        assert run.data.metrics[f"expert.{first.name}.rmse"] == pytest.approx(first.metrics["rmse"])
        local = Path(download_artifacts(run_id=run_id, artifact_path="bundle/manifest.json"))
        bundle = resolve_version(tmp_path / "store", "team")
        assert local.read_bytes() == (bundle / "manifest.json").read_bytes()
    assert [e.source.format for e in manifest.experts if e.source] == [
        "mlflow:sklearn",
        "mlflow:xgboost",
        "mlflow:onnx",
    ]
    assert manifest.experts[1].source is not None
    assert manifest.experts[1].source.uri == "models:/xgb/1"
    check_served(team, tmp_path / "store", tmp_path)
