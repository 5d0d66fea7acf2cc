"""``iabma train`` end to end, and its errors, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.bundle.loader import open_bundle, resolve_version


def iabma(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_train_the_simulation_demo(tmp_path) -> None:
    res = iabma(
        "train",
        "--dataset",
        "simulation",
        "--store",
        str(tmp_path / "store"),
        "--name",
        "demo",
        "--quiet",
        cwd=Path.cwd(),
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for word in ("accuracy", "ece", "nll", "iabma", "uniform", "circle_fit", "wrote"):
        assert word in out
    # Which gate shipped and why, and the test NLL against the plain combiners with its
    # bootstrap standard error.
    assert "shipped gate: network: the network beats the pool by " in out
    assert "bootstrap standard error" in out
    bundle = open_bundle(resolve_version(tmp_path / "store", "demo"))
    m = bundle.manifest
    assert m.metrics["iabma"]["accuracy"] > m.metrics["uniform"]["accuracy"]
    assert len(m.experts) == 5 and m.gate.inputs == ["f_x1", "f_x2"]
    versus = m.training["versus_plain"]
    assert versus["se_difference"] > 0
    assert versus["rival"] == "uniform" or versus["rival"].startswith("expert ")
    assert versus["nll"] == pytest.approx(m.metrics["iabma"]["nll"], abs=1e-6)


@pytest.mark.slow
def test_train_any_csv_regression(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "size": rng.uniform(20, 200, n),
            "rooms": rng.integers(1, 6, n),
            "town": rng.choice(["a", "b", "c"], n),
            "id": np.arange(n),
        }
    )
    df["price"] = 3 * df["size"] + 20 * (df["town"] == "a") + rng.normal(0, 10, n)
    path = tmp_path / "houses.csv"
    df.to_csv(path, index=False)
    res = iabma(
        "train",
        "--csv",
        str(path),
        "--target",
        "price",
        "--task",
        "regression",
        "--drop",
        "id",
        "--name",
        "houses",
        "--store",
        str(tmp_path / "s"),
        "--quiet",
        cwd=Path.cwd(),
    )
    assert res.returncode == 0, res.stderr
    for word in ("rmse", "r2", "nll", "linear", "forest", "knn", "hgb", "mlp"):
        assert word in res.stdout
    assert (
        "shipped gate: " in res.stdout
        and "took no part in choosing it; held-out NLL: " in res.stdout
    )
    manifest = json.loads(next((tmp_path / "s" / "houses").glob("2*/manifest.json")).read_text())
    assert "id" not in [f["name"] for f in manifest["features"]]
    assert manifest["target"]["name"] == "price"


@pytest.mark.slow
def test_bad_arguments_exit_2_with_one_clear_line(tmp_path) -> None:
    df = pd.DataFrame({"a": range(60), "y": [0, 1] * 30})
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    res = iabma(
        "train",
        "--csv",
        str(path),
        "--target",
        "label",
        "--task",
        "classification",
        "--name",
        "x",
        "--store",
        str(tmp_path),
        cwd=Path.cwd(),
    )
    assert res.returncode == 2
    assert "d.csv: --target 'label' is not a column; the columns are ['a', 'y']" in res.stderr
    assert "Traceback" not in res.stderr
    res = iabma(
        "train", "--dataset", "mnist", "--name", "x", "--store", str(tmp_path), cwd=Path.cwd()
    )
    assert res.returncode == 2 and "dataset='mnist' must be one of" in res.stderr
    res = iabma("train", "--csv", str(path), "--name", "x", cwd=Path.cwd())
    assert res.returncode == 2 and "needs --target and --task" in res.stderr
