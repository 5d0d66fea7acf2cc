"""``iabma check``: the training file replays clean; refused rows and drifted metrics fail."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.bundle.loader import resolve_version
from training.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A CSV with awkward names and cells, and a bundle trained from it by the CLI."""
    tmp = tmp_path_factory.mktemp("check")
    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame(
        {
            "house size (m²)": rng.uniform(20, 200, n).round(1),
            "contract-type": rng.choice(["cellular", "telephone", "unknown"], n),
            "floor": [str(v) if v % 7 else "?" for v in rng.integers(0, 12, n)],
        }
    )
    df["price"] = 3 * df["house size (m²)"] + 40 * (df["contract-type"] == "unknown")
    df["price"] += rng.normal(0, 10, n).round(2)
    df.loc[5, "price"] = np.nan
    df.loc[5, "contract-type"] = "prepaid"  # a category only a row without a target holds
    path = tmp / "houses.csv"
    df.to_csv(path, index=False)
    store = tmp / "store"
    code = main(["train", "--csv", str(path), "--target", "price", "--task", "regression",
                 "--name", "houses", "--store", str(store), "--quiet"])  # fmt: skip
    assert code == 0
    return path, store


def check(capsys: pytest.CaptureFixture[str], store: Path, csv: Path) -> tuple[int, str]:
    code = main(["check", "--store", str(store), "--name", "houses", "--csv", str(csv)])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.slow
def test_the_training_file_replays_and_reproduces_the_metrics(
    trained: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, store = trained
    code, out = check(capsys, store, path)
    assert code == 0, out
    assert "accepted 399 rows, refused 0" in out
    # Training dropped the row without a target, and "prepaid" with it: refused, apart.
    assert "also refused 1 row without a target" in out
    assert "      6  contract-type" in out and 'unknown category "prepaid"' in out
    assert "metrics on 80 rows (the training run's test rows)" in out
    assert "every metric is within 0.0001 of the recorded one" in out


def test_refused_rows_are_listed_and_fail_the_check(
    trained: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = trained
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[2, "contract-type"] = "satellite"
    df.loc[7, "house size (m²)"] = "big"
    df.loc[7, "contract-type"] = "balloon"  # two faults in one row: still one row refused
    new = tmp_path / "new.csv"
    df.to_csv(new, index=False)
    code, out = check(capsys, store, new)
    assert code == 1
    assert "accepted 397 rows, refused 2" in out
    assert "      3  contract-type" in out and "unknown_category" in out
    assert "      8  house size (m²)" in out and "wrong_type" in out
    # Not the training file any more: metrics are shown, not compared.
    assert "every row with a target" in out
    # A second copy of the header after data row 5 is dropped; rows keep their file numbers.
    lines = new.read_text().splitlines(keepends=True)
    new.write_text("".join(lines[:6] + lines[:1] + lines[6:]))
    code, out = check(capsys, store, new)
    assert code == 1 and "dropped 1 row repeating the header (data row 6)" in out
    assert "accepted 397 rows, refused 2" in out
    assert "      7  contract-type" in out, "the row without a target, past the header copy"
    assert "      3  contract-type" in out and "      9  house size (m²)" in out


@pytest.mark.slow
def test_the_training_file_with_its_header_repeated_still_matches(
    trained: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The test split is found by file row, past the dropped header copy."""
    path, store = trained
    lines = path.read_text().splitlines(keepends=True)
    joined = tmp_path / "joined.csv"
    joined.write_text("".join(lines[:201] + lines[:1] + lines[201:]))
    code, out = check(capsys, store, joined)
    assert code == 0, out
    assert "accepted 399 rows, refused 0" in out
    assert "metrics on 80 rows (the training run's test rows)" in out
    assert "every metric is within 0.0001 of the recorded one" in out


def test_a_metric_that_does_not_match_fails_the_check(
    trained: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = trained
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    manifest = resolve_version(copy, "houses") / "manifest.json"
    manifest.chmod(0o644)
    data = json.loads(manifest.read_text())
    data["metrics"]["iabma"]["rmse"] += 0.5
    manifest.write_text(json.dumps(data))
    code, out = check(capsys, copy, path)
    assert code == 1
    assert "MISMATCH" in out and "rmse" in out


def test_a_bundle_remembers_its_files_encoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trained from Excel's cp1252 export, the bundle's check reads the same file without
    being told the encoding again."""
    rng = np.random.default_rng(5)
    n = 120
    size = rng.uniform(20, 200, n).round(1)
    town = rng.choice(["Orl\u00e9ans", "S\u00e8te", "Besan\u00e7on"], n)
    price = (30_000 * size + rng.normal(0, 50_000, n)).round(2)  # francs: a large RMSE
    lines = ["surface (m\u00b2);ville;prix (\u20ac)"]
    lines += [f"{s};{t};{p}".replace(".", ",") for s, t, p in zip(size, town, price, strict=True)]
    path = tmp_path / "excel.csv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))
    store = tmp_path / "store"
    code = main(["train", "--csv", str(path), "--target", "prix (\u20ac)", "--task",
                 "regression", "--encoding", "cp1252", "--name", "houses", "--store",
                 str(store), "--quiet"])  # fmt: skip
    assert code == 0
    code, out = check(capsys, store, path)
    assert code == 0, out
    assert f"accepted {n} rows, refused 0" in out
    assert "every metric is within 0.0001 of the recorded one" in out
    # Six-figure metrics keep their columns apart.
    assert re.search(r"\nrmse +\d{5,}\.\d{6} +\d{5,}\.\d{6} +[+-]", out), out


def test_a_reader_gone_ends_the_check_quietly(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """``iabma check ... | head -1``: no 'internal error', the shell's code for SIGPIPE."""
    path, store = trained
    argv = [sys.executable, "-m", "training.cli", "check", "--store", str(store), "--name",
            "houses", "--csv", str(path)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141, err
    assert first.startswith(b"replaying 400 rows") and "error" not in err
