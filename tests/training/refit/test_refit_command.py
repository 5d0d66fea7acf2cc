"""``iabma refit`` as a user runs it: on a trail with outcomes, through the real app and
onnxruntime. The outcomes follow one expert (``lda``); the refitted gate must find it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.bundle.loader import open_bundle
from app.bundle.pointer import current
from app.cli.main import main
from tests.support.bundles import instances, make_settings
from tests.support.harness import AsgiHarness
from tests.support.outcomes import drawn_from
from tests.training.refit.conftest import FIXED_IABMA, PER_REQUEST, TRUTH, Gates, World
from training.datasets import simulate


def refit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["refit", "--quiet", *args])
    out, err = capsys.readouterr()
    return code, out, err


def versions(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "demo").iterdir() if p.name[0].isdigit())


def served(path: Path, X: pd.DataFrame, outputs: list[str]) -> list[np.ndarray]:
    """The named outputs of a bundle's served graph on the numeric frame ``X``."""
    bundle = open_bundle(path)
    feeds = {f.input: np.asarray(X[f.name], np.float32)[:, None] for f in bundle.manifest.features}
    return [np.asarray(a) for a in bundle.session.run(outputs, feeds)]


def staged(store: Path, before: list[str]) -> tuple[Path, dict[str, Any]]:
    """The one version a refit added to ``before``, and its manifest."""
    (new,) = set(versions(store)) - set(before)
    return store / "demo" / new, json.loads((store / "demo" / new / "manifest.json").read_text())


def settings(manifest: dict[str, Any]) -> dict[str, Any]:
    """A gate's recorded settings: not what its fit chose, nor how it reported."""
    return {k: v for k, v in manifest["gate"]["params"].items() if k not in ("selected", "verbose")}


def fresh_nll(path: Path, X: pd.DataFrame, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL of a bundle's served graph on ``(X, y)``, and its weights."""
    p, w = served(path, X, ["probabilities", "weights"])
    return float(-np.log(p[np.arange(len(y)), y]).mean()), np.asarray(w)


def test_labels_from_one_expert_close_the_gap_to_it_and_leave_latest(
    world: World, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--audit-url", world.full_url,
        "--no-publish",
    )  # fmt: skip
    assert code == 0, err
    assert current(store / "demo") == world.version, "--no-publish leaves LATEST"
    new = next(v for v in versions(store) if v != world.version)
    assert f"staged {store / 'demo' / new}" in out
    assert "bootstrap standard error of the paired difference" in out
    old_m = json.loads((store / "demo" / world.version / "manifest.json").read_text())
    new_m = json.loads((store / "demo" / new / "manifest.json").read_text())
    for e_old, e_new in zip(old_m["experts"], new_m["experts"], strict=True):
        old_bytes = (store / "demo" / world.version / e_old["file"]).read_bytes()
        assert (store / "demo" / new / e_new["file"]).read_bytes() == old_bytes
        assert e_new["sha256"] == e_old["sha256"]
    provenance = new_m["training"]["refit"]
    assert provenance["source_version"] == world.version
    assert provenance["rows"] == 2000 and provenance["n_held_out"] == 400
    assert provenance["new_nll"] < provenance["old_nll"]
    assert provenance["first_row"] <= provenance["last_row"]

    # Fresh rows of the same world: the outcomes follow lda's own probabilities.
    fresh = simulate(3000, 99).X
    old_path, new_path = store / "demo" / world.version, store / "demo" / new
    bundle = open_bundle(old_path)
    feeds = {
        f.input: np.asarray(fresh[f.name], np.float32)[:, None] for f in bundle.manifest.features
    }
    (experts,) = bundle.session.run(["expert_probabilities"], feeds)
    j = bundle.manifest.expert_names.index(TRUTH)
    rng = np.random.default_rng(5)
    truth_p = experts[:, j]
    y = (rng.random(len(fresh)) < truth_p[:, 1]).astype(np.int64)
    old_nll, _ = fresh_nll(old_path, fresh, y)
    new_nll, new_w = fresh_nll(new_path, fresh, y)
    expert_nll = float(-np.log(truth_p[np.arange(len(y)), y]).mean())
    closed = (old_nll - new_nll) / (old_nll - expert_nll)
    print(f"gap closed {closed:.3f}: old {old_nll:.4f} new {new_nll:.4f} {TRUTH} {expert_nll:.4f}")
    print(f"mean weight on {TRUTH}: {new_w[:, j].mean():.3f}")
    assert closed >= 0.8, (old_nll, new_nll, expert_nll)
    assert new_w[:, j].mean() >= 0.6
    # The staged version is a version like any other: promote verifies and serves it.
    assert main(["promote", "--store", str(store), "--name", "demo", new]) == 0
    assert current(store / "demo") == new


def test_promote_if_better_moves_latest_shows_provenance_and_rolls_back(
    world: World, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--audit-url", world.full_url,
        "--promote-if-better", "--holdout", "0.3",
    )  # fmt: skip
    assert code == 0, err
    new = current(store / "demo")
    assert new != world.version and "pointed" in out
    manifest = json.loads((store / "demo" / new / "manifest.json").read_text())
    provenance = manifest["training"]["refit"]
    assert provenance["n_held_out"] == 600
    with AsgiHarness(make_settings(store, tmp_path)) as app:
        models = app.get("/models").json()
        assert models["version"] == new and models["training"]["refit"] == provenance
        page = app.get("/audit/bundle", headers={"Accept": "text/html"})
        assert page.status_code == 200
        facts = page.text.split('id="refit-facts"')[1].split("</dl>")[0]
        for shown in (
            world.version,
            f"{provenance['old_nll']:.4f}",
            f"{provenance['new_nll']:.4f}",
        ):
            assert shown in facts
        assert f"{provenance['rows']}: gate fitted on {provenance['n_fit']}" in facts
    assert main(["rollback", "--store", str(store), "--name", "demo"]) == 0
    assert current(store / "demo") == world.version


def test_hashed_inputs_come_from_a_csv_that_matches_the_trail(
    world: World, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--store", str(store), "--name", "demo", "--audit-url", world.hash_url]
    code, _, err = refit(capsys, *common)
    assert code == 2
    assert err.count("\n") == 1 and "keeps no inputs for 600 of 600" in err and "--csv" in err

    frame = pd.concat([pd.DataFrame(rows).assign(rid=rid) for rid, rows in world.hash_sent.items()])
    good = tmp_path / "inputs.csv"
    frame.to_csv(good, index=False)
    code, _, err = refit(capsys, *common, "--csv", str(good), "--id-column", "rid")
    assert code == 0, err
    staged = [v for v in versions(store) if v != world.version]
    manifest = json.loads((store / "demo" / staged[0] / "manifest.json").read_text())
    assert manifest["training"]["refit"]["inputs"] == "csv"

    bad = tmp_path / "bad.csv"
    frame.assign(x1=frame["x1"].where(frame.index != 3, frame["x1"] + 0.5)).to_csv(bad, index=False)
    code, _, err = refit(capsys, *common, "--csv", str(bad), "--id-column", "rid")
    assert code == 2
    assert err.count("\n") == 1 and "do not match the trail's keyed hash" in err


def test_too_few_rows_is_refused_stating_the_minimum(
    world: World, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--audit-url", world.full_url,
        "--until", "2000-01-01T00:00:00Z",
    )  # fmt: skip
    assert code == 2
    assert err.count("\n") == 1 and "0 in the window, a refit needs at least 200" in err
    assert versions(store) == [world.version]


def test_rows_served_by_other_experts_are_refused(
    world: World, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.outcomes import serve_with_outcomes
    from training.estimator import IABMAClassifier
    from training.experts.defaults import simulation_experts
    from training.export.bundle import export_bundle

    train = simulate(500, 1)
    two = [e for e in simulation_experts() if e.name in ("poly2", "lda")]
    est = IABMAClassifier(two, random_state=0).fit(train.X, train.y)
    export_bundle(est, store, "demo", train.X)  # LATEST now names it
    rows = instances(simulate(250, 3).X)
    serve_with_outcomes(store, tmp_path, rows, drawn_from("lda", np.random.default_rng(1)))
    code, _, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--version", world.version,
        "--audit-url", f"sqlite:///{tmp_path / 'audit.db'}",
    )  # fmt: skip
    assert code == 2
    assert err.count("\n") == 1
    assert "250 outcome rows were served by versions with other experts" in err
    assert "poly2, lda" in err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--holdout", "0.9"], "--holdout=0.9 must be a finite number in [0.05, 0.5]"),
        (["--since", "yesterday"], "--since='yesterday' must be an ISO-8601 time"),
        (["--version", "v0"], "--version='v0'"),
        (["--csv", "x.csv"], "--csv='x.csv' and --id-column go together"),
        (["--combiner", "mean"], "--combiner='mean' must be one of best_single, uniform, "),
        (["--kl-weight", "big"], "--kl-weight='big' must be a number or 'auto'"),
        (
            ["--combiner", "stacking", "--kl-weight", "0.1"],
            "--kl-weight='0.1' applies to an iabma gate, and this one is 'stacking'",
        ),
    ],
)
def test_bad_options_are_one_line_naming_the_option(
    world: World, store: Path, extra: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--audit-url", world.full_url, *extra
    )
    assert code == 2
    assert err.count("\n") == 1 and said in err
    assert versions(store) == [world.version]


def test_a_trail_without_outcomes_is_named(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    code, _, err = refit(capsys, "--store", str(store), "--name", "demo", "--audit-url", url)
    assert code == 2 and err.count("\n") == 1 and "holds no outcomes" in err


def test_the_latest_requests_are_held_out_whole_and_the_report_says_when(
    world: World, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy import create_engine

    from app.audit.read.labelled import labelled_rows
    from app.audit.store.records import iso_from_us

    code, out, err = refit(
        capsys, "--store", str(store), "--name", "demo", "--audit-url", world.full_url
    )
    assert code == 0, err
    _, manifest = staged(store, [world.version])
    p = manifest["training"]["refit"]
    assert p["fit_last_row"] < p["held_out_first_row"]  # one ISO format: text order is time
    assert (
        f"gate fitted on 1,600 rows served {p['fit_first_row']} to {p['fit_last_row']}; held "
        f"out the latest 8 requests, 400 rows served {p['held_out_first_row']} to "
        f"{p['held_out_last_row']}"
    ) in out
    assert "2000 resamples of the 8 held-out requests, whole" in out
    # Each request of the trail on one side, whole: the 8 latest held out.
    engine = create_engine(world.full_url)
    rows, _ = labelled_rows(engine, "demo")
    engine.dispose()
    sides: dict[str, set[str]] = {}
    for r in rows:
        when = iso_from_us(r.record_us)
        assert when <= p["fit_last_row"] or when >= p["held_out_first_row"]
        sides.setdefault(r.request_id, set()).add("held" if when > p["fit_last_row"] else "fit")
    assert all(len(s) == 1 for s in sides.values())
    held = sorted((k for k, s in sides.items() if s == {"held"}), key=lambda k: int(k[1:]))
    assert held == [f"r{k}" for k in range(32, 40)]
    assert p["n_held_requests"] == 8 and p["n_held_out"] == 8 * PER_REQUEST
    assert p["fit_first_row"] == iso_from_us(min(r.record_us for r in rows))
    assert p["held_out_last_row"] == iso_from_us(max(r.record_us for r in rows))


def test_a_bundle_refits_its_own_gate_and_settings_unless_told_otherwise(
    world: World, gates: Gates, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Path(shutil.copytree(gates.store, tmp_path / "store"))
    common = ["--store", str(store), "--name", "demo", "--audit-url", world.full_url]
    fixed = json.loads((store / "demo" / gates.fixed / "manifest.json").read_text())
    assert {k: settings(fixed)[k] for k in FIXED_IABMA} == FIXED_IABMA

    before = versions(store)
    code, out, err = refit(capsys, *common, "--version", gates.fixed)
    assert code == 0, err
    assert f"gate: iabma with the settings {gates.fixed} records\n" in out
    _, kept = staged(store, before)
    assert kept["gate"]["combiner"] == "iabma" and settings(kept) == settings(fixed)
    assert kept["gate"]["params"]["selected"]["kl_weight"] == 0.3
    assert kept["gate"]["prior"]["temperature"] == 4.0
    assert kept["training"]["refit"]["combiner"] == "iabma"
    assert kept["training"]["refit"]["overrides"] == {}

    before = versions(store)
    told = ["--version", gates.fixed, "--kl-weight", "0.01", "--seed", "3"]
    code, out, err = refit(capsys, *common, *told)
    assert code == 0, err
    assert f"gate: iabma with the settings {gates.fixed} records, but kl_weight=0.01" in out
    _, changed = staged(store, before)
    assert settings(changed) == {**settings(fixed), "kl_weight": 0.01, "random_state": 3}
    assert changed["training"]["refit"]["overrides"] == {"kl_weight": 0.01, "random_state": 3}

    before = versions(store)
    code, out, err = refit(capsys, *common, "--version", gates.stacking)
    assert code == 0, err
    path, pool = staged(store, before)
    assert pool["gate"]["combiner"] == "stacking" and pool["gate"]["prior"] is None
    assert "stacking" in pool["metrics"] and "served gate" in pool["metrics"]
    assert open_bundle(path).manifest.gate.combiner == "stacking"  # verified as served

    before = versions(store)
    code, out, err = refit(capsys, *common, "--version", gates.stacking, "--combiner", "iabma")
    assert code == 0, err
    assert f"gate: iabma with its defaults ({gates.stacking}'s gate is stacking)" in out
    path, network = staged(store, before)
    assert network["gate"]["combiner"] == "iabma" and network["gate"]["prior"] is not None
    assert network["gate"]["params"]["kl_weight"] == "auto"
    assert network["training"]["refit"]["overrides"] == {"combiner": "iabma"}
    assert open_bundle(path).manifest.gate.combiner == "iabma"
