"""``iabma train --experts``: the options' faults, and --mlflow-log read back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.bundle.loader import open_bundle, resolve_version
from app.cli.main import main
from tests.support.team_files import TeamFiles
from tests.support.team_mlflow import tracking_env


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


@pytest.mark.slow
def test_mlflow_log_records_the_bundle_as_a_run(
    team: TeamFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow import MlflowClient
    from mlflow.artifacts import download_artifacts

    with tracking_env((tmp_path / "mlruns").as_uri()):
        code = main(train(team, tmp_path, "--mlflow-log", "--cv", "3"))
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
