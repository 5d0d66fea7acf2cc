"""docs/byo-models.md's worked example runs as written: the team's script, its
experts.toml and the one `iabma train` command, in an empty folder; the bundle then serves
each model's own predictions."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest

from app.bundle.loader import open_bundle, resolve_version
from app.cli.main import main
from tests.support.bundles import instances, make_settings
from tests.support.harness import AsgiHarness
from training.experts.tolerance import n_terms, parity_tolerance

DOC = Path(__file__).resolve().parents[2] / "docs" / "byo-models.md"


def example_blocks() -> tuple[str, str, str]:
    """The worked example's python, toml and bash blocks, in the page's order."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## A worked example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)
    assert [lang for lang, _ in blocks] == ["python", "toml", "bash"], blocks
    return blocks[0][1], blocks[1][1], blocks[2][1]


def test_the_worked_example_trains_a_bundle_that_serves_the_teams_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script, toml, command = example_blocks()
    monkeypatch.chdir(tmp_path)
    team: dict[str, object] = {}
    exec(compile(script, "team.py", "exec"), team)  # the page's own code, as written
    (tmp_path / "experts.toml").write_text(toml, encoding="utf-8")
    argv = shlex.split(command)
    assert argv[0] == "iabma"
    code = main(argv[1:])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "(experts converted, not refit," in out

    store = tmp_path / "models_store"
    path = resolve_version(store, "team")
    manifest = open_bundle(path).manifest
    assert [e.name for e in manifest.experts] == ["ridge", "xgb", "forest"]
    assert all(e.prefit for e in manifest.experts)
    X = pd.read_csv(tmp_path / "recent.csv").drop(columns="y").head(40)
    with AsgiHarness(make_settings(store, tmp_path / "audit", name="team")) as app:
        r = app.post("/predict", json={"instances": instances(X)})
    assert r.status_code == 200, r.text
    items = r.json()["predictions"]
    # The bundle feeds float32 rows (the page says to compare on those).
    fed = X.astype(np.float32)
    own = {
        "ridge": team["ridge"].predict(fed.astype(np.float64)),  # type: ignore[attr-defined]
        "xgb": team["booster"].predict(fed.astype(np.float64)),  # type: ignore[attr-defined]
        "forest": team["forest"].predict(fed.to_numpy()),  # type: ignore[attr-defined]
    }
    for e in manifest.experts:
        got = np.array([it["experts"][e.name]["mean"] for it in items])
        terms = n_terms(onnx.load(str(path / e.file)))
        assert np.abs(got - own[e.name]).max() <= parity_tolerance(own[e.name], terms), e.name
