"""``iabma feedback`` against a real uvicorn: a CSV posted in batches with a progress bar,
run again safely, a bad line named, and no ``training`` needed."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.cli.main import main
from tests.support.bundles import Bundles
from tests.support.harness import ROOT, UvicornProcess

KEY = "feedback-key"


@pytest.fixture(scope="module")
def server(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    audit = tmp_path_factory.mktemp("cli") / "audit.db"
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": f"sqlite:///{audit}",
        "IABMA_FEEDBACK_KEYS": KEY,
        "IABMA_LOG_LEVEL": "WARNING",
    }
    with UvicornProcess(env) as served:
        served.wait_ready()
        yield served.base_url


def outcomes_file(url: str, bundles: Bundles, path: Path, rid: str) -> list[list[str]]:
    """Two predictions of 4 rows; a CSV with every row's label, one line left empty."""
    lines = []
    for k in range(2):
        r = httpx.post(
            url + "/predict",
            json={"instances": bundles.demo.instances(slice(4 * k, 4 * k + 4))},
            headers={"X-Request-ID": f"{rid}-{k}"},
        )
        for i, item in enumerate(r.json()["predictions"]):
            lines.append([f"{rid}-{k}", str(i), str(item["prediction"]["label"])])
    lines[5][2] = ""  # no outcome yet
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["request", "row", "y"])
        writer.writerows(lines)
    return lines


def args(url: str, path: Path, *more: str) -> list[str]:
    return ["feedback", "--url", url, "--csv", str(path), "--id-column", "request",
            "--row-column", "row", "--outcome-column", "y", *more]  # fmt: skip


def test_a_file_is_posted_in_batches_and_again_as_duplicates(
    server: str, bundles: Bundles, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    path = tmp_path / "outcomes.csv"
    outcomes_file(server, bundles, path, "cli-ok")
    monkeypatch.setenv("IABMA_FEEDBACK_KEY", KEY)
    assert main(args(server, path, "--batch-rows", "3")) == 0
    out, err = capsys.readouterr()
    assert "7 outcomes: 7 accepted, 0 duplicates" in out and "1 lines without an outcome" in out
    assert "] 7 of 7 outcomes" in err and "[" + "#" * 30 + "]" in err, "the progress bar"
    assert main(args(server, path)) == 0
    assert "7 outcomes: 0 accepted, 7 duplicates" in capsys.readouterr().out


def test_a_refused_line_is_named_and_the_batches_before_it_stay(
    server: str, bundles: Bundles, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    path = tmp_path / "outcomes.csv"
    lines = outcomes_file(server, bundles, path, "cli-bad")
    lines[4][2] = "maybe"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([["request", "row", "y"], *lines])
    monkeypatch.setenv("IABMA_API_KEY", KEY)
    assert main(args(server, path, "--batch-rows", "3")) == 2
    err = capsys.readouterr().err
    # Line 6 of the file (the header is line 1) is the second batch's second outcome.
    assert "line 6, column 'y': \"maybe\" is not a class of this model" in err
    assert "the 3 outcomes before this batch were stored" in err
    report = httpx.get(server + "/performance").json()
    assert report["rows"] >= 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--outcome-column", "label"], "--outcome-column='label' is not a column"),
        (["--batch-rows", "0"], "--batch-rows=0 must be at least 1"),
        (["--url", "ftp://x"], "--url='ftp://x'"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str],
    message: str,
) -> None:  # fmt: skip
    path = tmp_path / "outcomes.csv"
    path.write_text("request,row,y\nr,0,1\n")
    given = args(server, path)
    if change[0] in given:
        given[given.index(change[0]) + 1] = change[1]
    else:
        given += change
    assert main(given) == 2
    assert message in capsys.readouterr().err


def test_a_bad_row_and_an_unreachable_server_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "outcomes.csv"
    path.write_text("request,row,y\nr,first,1\n")
    assert main(args("http://127.0.0.1:9", path)) == 2
    assert "line 2, column 'row': expected a row number" in capsys.readouterr().err
    path.write_text("request,row,y\nr,0,1\n")
    assert main(args("http://127.0.0.1:9", path)) == 2
    assert "POST /feedback failed" in capsys.readouterr().err


def test_it_runs_without_the_training_side(server: str, bundles: Bundles, tmp_path: Path) -> None:
    path = tmp_path / "outcomes.csv"
    outcomes_file(server, bundles, path, "cli-alone")
    code = (
        "import sys; sys.modules['training'] = sys.modules['torch'] = None; "
        "from app.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args(server, path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "IABMA_FEEDBACK_KEY": KEY},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "7 outcomes: 7 accepted" in done.stdout
