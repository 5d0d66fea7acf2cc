"""experts.toml: the format of issue 42, read into a registry of pre-fitted experts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.team_files import TeamFiles
from training.errors import ParameterError
from training.experts.experts_toml import read_experts_toml

THREE = """
[[experts]]
name = "ridge"                   # required
source = "ridge.skops"

[[experts]]
name = "xgb"
source = "xgb_model.json"
features = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]

[[experts]]
name = "forest"
source = "rf.onnx"
features = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
"""


def write(folder: Path, text: str, name: str = "experts.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_three_files_become_three_prefit_experts(team: TeamFiles, monkeypatch) -> None:
    path = write(team.folder, THREE)
    monkeypatch.chdir(path.anchor)  # relative sources resolve against the file, not the cwd
    reg = read_experts_toml(path, task="regression")
    assert reg.names == ["ridge", "xgb", "forest"]
    ridge, xgb, forest = reg
    assert all(e.prefit and e.source is not None for e in reg)
    assert [e.source.format for e in reg if e.source] == ["skops", "xgboost-json", "onnx"]
    assert ridge.features is None and xgb.features is not None and len(xgb.features) == 10
    assert forest.model == (team.folder / "rf.onnx").resolve()
    assert ridge.source is not None and ridge.source.uri == "ridge.skops"
    assert type(xgb.model).__name__ == "XGBRegressor"


def test_classes_and_variance_output_are_carried(team: TeamFiles) -> None:
    reg = read_experts_toml(
        write(team.folder, '[[experts]]\nname = "r"\nsource = "rf.onnx"\nvariance_output = "v"\n'),
        task="regression",
    )
    assert next(iter(reg)).variance_output == "v"
    reg = read_experts_toml(
        write(
            team.folder, '[[experts]]\nname = "c"\nsource = "rf.onnx"\nclasses = ["no", "yes"]\n'
        ),
        task="classification",
    )
    assert next(iter(reg)).classes == ("no", "yes")


ONE = '[[experts]]\nname = "ridge"\nsource = "ridge.skops"\n'


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (ONE + 'sorce = "x"\n', r"expert 'ridge': unknown key 'sorce'; known keys: name, source"),
        ('[[experts]]\nsource = "ridge.skops"\n', r"expert #1: needs name"),
        ('[[experts]]\nname = "ridge"\n', r"expert 'ridge': needs source"),
        (ONE + 'features = "age"\n', r"expert 'ridge': features='age' must be a list of column"),
        (ONE + "features = [1, 2]\n", r"features=\[1, 2\] must be a list"),
        (ONE + "variance_output = 3\n", r"variance_output=3 must be an output's name"),
        (ONE + 'classes = ["a", "b"]\n', r"classes=\['a', 'b'\] must list .* in classification"),
        (ONE + ONE, r"expert 'ridge': is named twice"),
        (ONE + 'source = "again"\n', r"is not valid TOML"),
        ('title = "x"\n' + ONE, r"top level: unknown key 'title'"),
        ("", r"no expert tables"),
        ("experts = [1, 2]\n", r"must be \[\[experts\]\] tables"),
        (
            '[[experts]]\nname = "m"\nsource = "missing.onnx"\n',
            r"expert 'm': source='missing.onnx' is not an existing file",
        ),
        (
            '[[experts]]\nname = "j"\nsource = "ridge.joblib"\n',
            r"expert 'j': source='ridge.joblib' is a pickle.*--trust-pickle",
        ),
        ('[[experts]]\nname = "../x"\nsource = "rf.onnx"\n', r"expert '../x': "),
    ],
)
def test_a_bad_file_names_the_file_expert_and_key(team: TeamFiles, text: str, problem: str) -> None:
    path = write(team.folder, text, "bad.toml")
    with pytest.raises(ParameterError, match=problem) as info:
        read_experts_toml(path, task="regression")
    assert str(info.value).startswith(f"experts='{path}' ")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match=r"experts='.*nothere.toml' is not an existing file"):
        read_experts_toml(tmp_path / "nothere.toml", task="regression")
