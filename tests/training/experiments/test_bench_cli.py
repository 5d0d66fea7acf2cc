"""``iabma bench quality --csv``: any table works, and bad input fails with one clear line.

The error cases call ``training.cli.main`` in-process (an uncaught exception would fail
the test, as a traceback would); one of them also runs in a fresh interpreter.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bench_harness import run_cli

from training.cli import main


def run_main(capsys, *args: str) -> tuple[int, str]:
    code = main(["bench", *args])
    return code, capsys.readouterr().err


def assert_clean_error(code: int, stderr: str, *fragments: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iabma bench: error:"), stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.slow
def test_a_csv_sample_of_credit_g_runs_end_to_end(tmp_path, data_dir, bench_cache) -> None:
    df = pd.read_csv(data_dir / "credit-g.csv").sample(300, random_state=0)
    path = tmp_path / "credit_small.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "out"
    proc = run_cli(
        "quality", "--csv", str(path), "--target", "class", "--task", "classification",
        "--reps", "1", "--out", str(out), "--cache-dir", str(bench_cache), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    assert (res["dataset"], res["task"], res["reps"]) == ("credit_small", "classification", 1)
    assert all(0.4 < s["accuracy"]["mean"] < 1.0 for s in res["methods"].values())
    details = json.loads((out / "details.json").read_text())
    assert details["experts"] == ["naive_bayes", "knn", "random_forest", "extra_trees",
                                  "linear_svm"]  # fmt: skip
    # Any CSV takes the "csv" section: the appendix's UCI lambda for the paper's row.
    assert details["params"]["iabma_paper"]["kl_weight"] == pytest.approx(0.1)
    assert (out / "reliability.png").is_file() and not (out / "weight_fields.png").exists()


def _write(tmp_path: Path, df: pd.DataFrame) -> str:
    path = tmp_path / "table.csv"
    df.to_csv(path, index=False)
    return str(path)


def _rows(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(0, 5, n)})


@pytest.mark.parametrize(
    ("frame", "target", "task", "fragments"),
    [
        (_rows(80).assign(y=[0, 1] * 40), "label", "classification", ["label", "not a column"]),
        (_rows(80).assign(y=3.5), "y", "regression", ["'y'", "is constant"]),
        (_rows(80).assign(y="yes"), "y", "classification", ["'y'", "has a single class"]),
        (_rows(30).assign(y=[0, 1] * 15), "y", "classification", ["30 usable rows", "50"]),
        (_rows(80).assign(y=["u", "v"] * 40), "y", "regression", ["'y'", "must be numeric"]),
    ],
    ids=["unknown-target", "constant-target", "single-class", "too-few-rows", "task-mismatch"],
)
def test_bad_csvs_exit_2_naming_the_problem(
    tmp_path, capsys, frame, target, task, fragments
) -> None:
    args = ("quality", "--csv", _write(tmp_path, frame), "--target", target, "--task", task,
            "--out", str(tmp_path / "out"))  # fmt: skip
    assert_clean_error(*run_main(capsys, *args), *fragments)
    assert not (tmp_path / "out").exists()


def test_a_csv_error_is_one_line_from_the_real_cli(tmp_path) -> None:
    path = _write(tmp_path, _rows(80).assign(y=[0, 1] * 40))
    proc = run_cli("quality", "--csv", path, "--target", "label", "--task", "classification",
                   "--out", str(tmp_path / "out"))  # fmt: skip
    assert_clean_error(proc.returncode, proc.stderr, "label", "not a column")


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        ({"dla": {"kk": 3}}, ["dla.kk", "not a known setting"]),
        ({"iabma": {"depth": 3}}, ["depth", "not a parameter of 'iabma'"]),
        ({"datasets": {"califonia": {"dla": {"k": 3}}}}, ["datasets.califonia", "not a dataset"]),
        ({"datasets": {"bike": {"dlaa": {"k": 3}}}}, ["datasets.bike.dlaa", "not a method"]),
    ],
)
def test_bad_configs_fail_before_any_work(tmp_path, capsys, config, fragments) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    args = ("quality", "--dataset", "simulation", "--reps", "1", "--config", str(path),
            "--out", str(tmp_path / "out"))  # fmt: skip
    assert_clean_error(*run_main(capsys, *args), *fragments)
    assert not (tmp_path / "out").exists()


def test_csv_options_are_checked(tmp_path, capsys) -> None:
    path = _write(tmp_path, _rows(80).assign(y=[0, 1] * 40))
    out = str(tmp_path / "out")
    assert_clean_error(*run_main(capsys, "quality", "--csv", path, "--out", out), "--target")
    args = ("quality", "--dataset", "simulation", "--target", "y", "--out", out)
    assert_clean_error(*run_main(capsys, *args), "--csv only")
