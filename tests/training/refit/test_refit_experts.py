"""``iabma refit --add-expert/--retire-expert/--exclude-poster`` on real trails: a team's
model joins a served regression bundle from the inputs the trail kept (or a checked CSV),
an expert leaves it, and a poster's outcomes are left out; the staged versions serve."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd
import pytest

from app.bundle.loader import open_bundle
from app.bundle.pointer import current
from app.cli.main import main
from tests.support.bundles import make_settings
from tests.support.harness import AsgiHarness
from tests.training.refit.conftest import ADDED_COLUMNS, RegWorld


def refit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["refit", "--quiet", *args])
    out, err = capsys.readouterr()
    return code, out, err


def versions(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "reg").iterdir() if p.name[0].isdigit())


def staged(store: Path, source: str) -> Path:
    (new,) = set(versions(store)) - {source}
    return store / "reg" / new


def common(world: RegWorld, store: Path, url: str | None = None) -> list[str]:
    return ["--store", str(store), "--name", "reg", "--audit-url", url or world.full_url]


def assert_kept_bytes(old: Path, new: Path, names: list[str]) -> None:
    """The experts ``names`` of ``new`` are ``old``'s files, byte for byte."""
    old_m, new_m = open_bundle(old).manifest, open_bundle(new).manifest
    for name in names:
        (a,) = [e for e in old_m.experts if e.name == name]
        (b,) = [e for e in new_m.experts if e.name == name]
        assert (new / b.file).read_bytes() == (old / a.file).read_bytes()
        assert b.sha256 == a.sha256 and b.sigma == a.sigma


def serve(store: Path, version: str, tmp_path: Path, rows: list[dict[str, Any]]) -> Any:
    """Promote ``version``, then answer ``rows`` through the app."""
    assert main(["promote", "--store", str(store), "--name", "reg", version]) == 0
    with AsgiHarness(make_settings(store, tmp_path / "serve", "reg")) as app:
        r = app.post("/predict", json={"instances": rows})
        assert r.status_code == 200, r.text
        return r.json()


def test_an_added_expert_joins_from_the_kept_inputs_and_serves(
    reg_world: RegWorld, reg_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = refit(
        capsys, *common(reg_world, reg_store), "--add-expert", f"gbm={reg_world.added}"
    )
    assert code == 0, err
    assert current(reg_store / "reg") == reg_world.version, "staged, not published"
    new, old = staged(reg_store, reg_world.version), reg_store / "reg" / reg_world.version
    manifest = open_bundle(new).manifest
    assert manifest.expert_names == ["ridge", "forest", "knn", "gbm"]
    assert_kept_bytes(old, new, ["ridge", "forest", "knn"])
    (gbm,) = [e for e in manifest.experts if e.name == "gbm"]
    assert gbm.kind == "onnx" and gbm.output_units == "original"
    assert sorted(manifest.feature(c).input for c in ADDED_COLUMNS) == sorted(gbm.inputs)
    provenance = manifest.training["refit"]
    assert provenance["inputs"] == "trail", "no CSV: the trail kept the inputs"
    assert provenance["experts_added"][0]["name"] == "gbm"
    assert provenance["experts_retired"] == []
    assert list(manifest.training["expert_tied_rows"]) == manifest.expert_names
    assert "expert added: gbm from" in out and "sigma" in out

    # Its spread comes from the fitting rows only: the rows served before the held-out ones.
    X = pd.DataFrame([row for rows in reg_world.sent.values() for row in rows])
    mu = reg_world.added_model.predict(X)
    y = np.asarray(reg_world.y)
    scale, mean = manifest.target.scale, manifest.target.mean
    assert scale is not None and mean is not None
    resid = (mu - y) / scale
    n_fit = provenance["n_fit"]
    assert gbm.sigma == pytest.approx(np.sqrt(np.mean(resid[:n_fit] ** 2)), rel=1e-4)
    assert gbm.sigma != pytest.approx(np.sqrt(np.mean(resid**2)), rel=1e-3)

    answer = serve(reg_store, new.name, tmp_path, reg_world.sent["q0"][:5])
    for item, want in zip(answer["predictions"], mu[:5], strict=True):
        assert sorted(item["experts"]) == ["forest", "gbm", "knn", "ridge"]
        assert item["experts"]["gbm"]["mean"] == pytest.approx(want, rel=1e-5)


def test_a_retired_expert_leaves_a_two_expert_version_that_serves(
    reg_world: RegWorld, reg_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = refit(capsys, *common(reg_world, reg_store), "--retire-expert", "knn")
    assert code == 0, err
    new, old = staged(reg_store, reg_world.version), reg_store / "reg" / reg_world.version
    manifest = open_bundle(new).manifest
    assert manifest.expert_names == ["ridge", "forest"]
    assert_kept_bytes(old, new, ["ridge", "forest"])
    assert not any("knn" in p.name for p in (new / "experts").iterdir())
    assert manifest.training["refit"]["experts_retired"] == ["knn"]
    assert list(manifest.training["expert_tied_rows"]) == ["ridge", "forest"]
    assert "expert retired: knn" in out
    assert manifest.gate.weight_histogram is not None
    assert sorted(manifest.gate.weight_histogram.counts) == ["forest", "ridge"]
    answer = serve(reg_store, new.name, tmp_path, reg_world.sent["q1"][:3])
    assert [sorted(item["experts"]) for item in answer["predictions"]] == [["forest", "ridge"]] * 3


def test_promote_if_better_judges_a_changed_set_like_any_refit(
    reg_world: RegWorld, reg_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = refit(
        capsys, *common(reg_world, reg_store), "--add-expert", f"gbm={reg_world.added}",
        "--retire-expert", "ridge", "--promote-if-better",
    )  # fmt: skip
    assert code == 0, err
    new = staged(reg_store, reg_world.version)
    provenance = open_bundle(new).manifest.training["refit"]
    better = provenance["difference"] < -provenance["se_difference"]
    assert (current(reg_store / "reg") == new.name) == better, out
    assert open_bundle(new).manifest.expert_names == ["forest", "knn", "gbm"]


def test_a_trail_of_hashes_takes_the_added_experts_inputs_from_a_checked_csv(
    reg_world: RegWorld, reg_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        *common(reg_world, reg_store, reg_world.hash_url),
        "--add-expert",
        f"gbm={reg_world.added}",
    ]
    code, _, err = refit(capsys, *args)
    assert code == 2 and err.count("\n") == 1
    assert f"--add-expert='gbm={reg_world.added}'" in err and "--csv" in err
    frame = pd.concat([pd.DataFrame(r).assign(rid=k) for k, r in reg_world.sent.items()])
    frame.to_csv(tmp_path / "inputs.csv", index=False)
    code, _, err = refit(capsys, *args, "--csv", str(tmp_path / "inputs.csv"), "--id-column", "rid")
    assert code == 0, err
    manifest = open_bundle(staged(reg_store, reg_world.version)).manifest
    assert manifest.expert_names[-1] == "gbm" and manifest.training["refit"]["inputs"] == "csv"


def posters(url: str) -> dict[str, int]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return dict(conn.execute("select poster, count(*) from iabma_outcomes group by poster"))


def test_an_excluded_posters_outcomes_are_left_out_exactly(
    reg_world: RegWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    counts = posters(reg_world.full_url)
    assert len(counts) == 2
    other = min(counts, key=counts.__getitem__)  # every fifth request's poster
    rows = {}
    for excluded in ([], ["--exclude-poster", other]):
        store = Path(shutil.copytree(reg_world.store, tmp_path / f"s{len(excluded)}"))
        code, out, err = refit(capsys, *common(reg_world, store), *excluded)
        assert code == 0, err
        provenance = open_bundle(staged(store, reg_world.version)).manifest.training["refit"]
        rows[len(excluded)] = provenance["rows"]
    assert rows[0] - rows[2] == counts[other] > 0
    assert provenance["excluded_rows"] == counts[other]
    assert provenance["excluded_posters"] == {other: counts[other]}
    assert f"excluded {counts[other]:,} outcome rows posted by {other} ({counts[other]:,})" in out


def hand_graph(
    nodes: list[tuple[str, list[str], list[str]]],
    inputs: list[str],
    width: int = 1,
    opset: int = 17,
    text: bool = False,
) -> Any:
    """A small ONNX graph of ``nodes`` (op, inputs, outputs) reading ``inputs`` as (n, 1)
    columns (text ones with ``text``), answering ``y`` of ``width`` values per row."""
    from onnx import TensorProto, helper

    kind = TensorProto.STRING if text else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node(op, ins, outs) for op, ins, outs in nodes], "hand",
        [helper.make_tensor_value_info(c, kind, [None, 1]) for c in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, width])],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


HAND = {
    # Opset 21, where onnx has no way back to 17 for ConstantOfShape.
    "late": hand_graph(
        [
            ("Shape", ["age"], ["s"]),
            ("ConstantOfShape", ["s"], ["z"]),
            ("Add", ["age", "z"], ["y"]),
        ],
        ["age"],
        opset=21,
    ),
    "infinite": hand_graph([("Sub", ["age", "age"], ["z"]), ("Div", ["age", "z"], ["y"])], ["age"]),
    "text": hand_graph([("Identity", ["age"], ["y"])], ["age"], text=True),
}


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--retire-expert", "lasso"], "--retire-expert='lasso' is not an expert of the bundle"),
        (["--add-expert", "ridge={added}"], "--add-expert='ridge' is already an expert"),
        (["--add-expert", "gbm"], "--add-expert='gbm' must be NAME=SOURCE"),
        (["--add-expert", "=x.onnx"], "--add-expert='=x.onnx' must be NAME=SOURCE"),
        (["--add-expert", "g/b=x.onnx"], "--add-expert='g/b=x.onnx' expert name"),
        (["--add-expert", "gbm=nowhere.onnx"], "'gbm=nowhere.onnx' is not an existing file"),
        (["--add-expert", "gbm=model.pkl"], "source='model.pkl' is not an existing file"),
        (["--add-expert", "gbm={wide}"], "expert 'gbm' takes 7 in its one tensor input"),
        (["--add-expert", "gbm={late}"], "(opset 21) cannot be brought to opset 17"),
        (["--add-expert", "gbm={infinite}"], "gives non-finite outputs on 292 of 292"),
        (["--add-expert", "gbm={text}"], "reads 'age' as text, and the bundle's column is numeric"),
        (
            ["--add-expert", "a={added}", "--add-expert", "a={added}"],
            "--add-expert='a' is given twice",
        ),
        (
            ["--retire-expert", "knn", "--retire-expert", "knn"],
            "--retire-expert='knn' is given twice",
        ),
        (
            ["--retire-expert", "knn", "--retire-expert", "ridge"],
            "--retire-expert='knn,ridge' would leave 1 expert; a bundle needs at least 2",
        ),
        (["--exclude-poster", "alice"], "--exclude-poster='alice' is not a poster"),
    ],
)
def test_bad_expert_and_poster_options_are_one_line_naming_them(
    reg_world: RegWorld,
    reg_store: Path,
    tmp_path: Path,
    extra: list[str],
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LinearRegression

    # One (n, 7) tensor, as skl2onnx writes by default: the bundle has 10 columns.
    wide = tmp_path / "wide.onnx"
    X = np.random.default_rng(0).normal(size=(30, 7))
    model = LinearRegression().fit(X, X.sum(axis=1))
    onx = convert_sklearn(model, initial_types=[("input", FloatTensorType([None, 7]))])
    wide.write_bytes(onx.SerializeToString())
    hand = {}
    for key, graph in HAND.items():
        hand[key] = tmp_path / f"{key}.onnx"
        hand[key].write_bytes(graph.SerializeToString())
    filled = [a.format(added=reg_world.added, wide=wide, **hand) for a in extra]
    code, _, err = refit(capsys, *common(reg_world, reg_store), *filled)
    assert code == 2, err
    assert err.count("\n") == 1 and said.format(added=reg_world.added) in err, err
    assert versions(reg_store) == [reg_world.version]


def test_the_staged_manifest_names_the_added_experts_source(
    reg_world: RegWorld, reg_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    code, _, err = refit(
        capsys, *common(reg_world, reg_store), "--add-expert", f"gbm={reg_world.added}"
    )
    assert code == 0, err
    new = staged(reg_store, reg_world.version)
    record = json.loads((new / "manifest.json").read_text())["training"]["refit"]
    (added,) = record["experts_added"]
    assert added == {
        "name": "gbm",
        "uri": str(reg_world.added),
        "format": "onnx",
        "sha256": hashlib.sha256(reg_world.added.read_bytes()).hexdigest(),
    }


def classifier_onnx(path: Path, zipmap: bool) -> Any:
    """A logistic regression on the simulation's two columns, written as skl2onnx does
    (with ZipMap, or the probabilities as a tensor); the fitted model."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import PolynomialFeatures

    from training.datasets import simulate

    train = simulate(500, 11)
    keep = ColumnTransformer([("keep", "passthrough", ["x1", "x2"])])
    steps = [("columns", keep), ("poly", PolynomialFeatures(2))]
    model = Pipeline([*steps, ("logit", LogisticRegression(max_iter=500))])
    model.fit(train.X, train.y)
    types = [(c, FloatTensorType([None, 1])) for c in ("x1", "x2")]
    options = None if zipmap else {id(model): {"zipmap": False}}
    opset = {"": 17, "ai.onnx.ml": 3}  # the served graph's; later ones may not convert down
    onx = convert_sklearn(model, initial_types=types, options=options, target_opset=opset)
    path.write_bytes(onx.SerializeToString())
    return model


def test_a_classifier_joins_a_five_expert_bundle_with_its_probabilities(
    world: Any, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.datasets import simulate

    model = classifier_onnx(tmp_path / "logit.onnx", zipmap=False)
    args = ["--store", str(store), "--name", "demo", "--audit-url", world.full_url]
    code, _, err = refit(capsys, *args, "--add-expert", f"logit={tmp_path / 'logit.onnx'}")
    assert code == 0, err
    (new,) = [
        p for p in (store / "demo").iterdir() if p.name[0].isdigit() and p.name != world.version
    ]
    old = store / "demo" / world.version
    bundle = open_bundle(new)
    names = open_bundle(old).manifest.expert_names
    assert bundle.manifest.expert_names == [*names, "logit"]
    assert_kept_bytes(old, new, names)
    X = simulate(50, 123).X
    feeds = {f.input: X[[f.name]].to_numpy(np.float32) for f in bundle.manifest.features}
    (experts,) = bundle.session.run(["expert_probabilities"], feeds)
    assert np.abs(experts[:, -1] - model.predict_proba(X)).max() < 1e-5

    zipped = tmp_path / "zipped.onnx"
    classifier_onnx(zipped, zipmap=True)
    code, _, err = refit(capsys, *args, "--add-expert", f"logit={zipped}")
    assert code == 2 and err.count("\n") == 1
    assert f"--add-expert='logit={zipped}'" in err and "zipmap=False" in err
    scores = tmp_path / "scores.onnx"  # two numbers a row, but not probabilities
    graph = hand_graph([("Concat", ["x1", "x2"], ["y"])], ["x1", "x2"], width=2)
    graph.graph.node[0].attribute.append(onnx.helper.make_attribute("axis", 1))
    scores.write_bytes(graph.SerializeToString())
    code, _, err = refit(capsys, *args, "--add-expert", f"logit={scores}")
    assert code == 2 and err.count("\n") == 1
    assert f"--add-expert='logit={scores}'" in err and "not probabilities" in err


def test_the_truth_brought_back_under_a_new_name_is_found_and_promoted(
    world: Any, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The outcomes follow lda, which the served gate hardly trusts: retired, then added
    again from its own file (inputs named as the graph's), it is found, and the version
    is promoted, as any refit that beats the served gate is."""
    from tests.training.refit.conftest import TRUTH

    old = store / "demo" / world.version
    (lda,) = [e for e in open_bundle(old).manifest.experts if e.name == TRUTH]
    code, out, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--audit-url", world.full_url,
        "--retire-expert", TRUTH, "--add-expert", f"truth={old / lda.file}",
        "--promote-if-better",
    )  # fmt: skip
    assert code == 0, err
    new = store / "demo" / current(store / "demo")
    assert new != old and "pointed" in out
    manifest = open_bundle(new).manifest
    assert manifest.expert_names[-1] == "truth" and TRUTH not in manifest.expert_names
    provenance = manifest.training["refit"]
    assert provenance["experts_added"][0]["sha256"] == lda.sha256, "the file read is named"
    assert provenance["difference"] < -provenance["se_difference"]
    weights = out.split("\nrefitted")[1].split("\n")[0].split()
    assert float(weights[-1]) > 0.6, out  # the refitted gate's mean weight on truth
