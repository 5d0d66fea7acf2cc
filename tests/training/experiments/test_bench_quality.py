"""``iabma bench quality`` end to end: files, schema, plots, --paper-literal and --config."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from training.experiments.config import load_config
from training.experiments.runner import run_quality
from training.experiments.schema import METHODS, METRICS, validate_results


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the PNG signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_results_json_has_exactly_the_documented_form(simulation_run) -> None:
    res = simulation_run.results
    validate_results(res)
    assert set(res) == {
        "dataset",
        "task",
        "reps",
        "methods",
        "fit_seconds",
        "tuning",
        "paired",
        "shipped",
        "chosen",
    }
    assert (res["dataset"], res["task"], res["reps"]) == ("simulation", "classification", 2)
    assert list(res["methods"]) == list(METHODS)
    for scores in res["methods"].values():
        assert list(scores) == list(METRICS["classification"])
        assert all(set(s) == {"mean", "sd"} for s in scores.values())
    # Each row says how it was tuned, and which mixture temperature it had.
    tuning = res["tuning"]
    assert list(tuning) == list(METHODS)
    assert tuning["moe"]["temperature"] == "none" and "paper" in tuning["moe"]["search"]
    for name in ("iabma", "moe_tuned"):
        assert tuning[name]["temperature"].startswith("fitted on the inner held-out rows")
    for name in ("stacking", "ensemble_selection", "bhs"):
        assert tuning[name]["temperature"].startswith("fitted on the out-of-fold")
    assert tuning["iabma_no_temp"]["temperature"] == "none"
    assert tuning["iabma_no_temp"]["temperature_fitted"] == {"mean": 1.0, "sd": 0.0}
    assert tuning["uniform"]["temperature_fitted"] == {"mean": 1.0, "sd": 0.0}
    # The default IA-BMA against every other row, paired by repetition, from the rows' own
    # per-repetition scores; and what each searched gate shipped and chose.
    pairs = res["paired"]
    assert (pairs["reference"], pairs["metric"]) == ("iabma", "nll")
    assert list(pairs["against"]) == [m for m in METHODS if m != "iabma"]
    details = json.loads((simulation_run.out / "details.json").read_text())["per_rep"]
    for rival, stat in pairs["against"].items():
        diff = [a["nll"] - b["nll"] for a, b in zip(details["iabma"], details[rival], strict=True)]
        assert stat["mean"] == pytest.approx(np.mean(diff), abs=1e-12)
        assert stat["sd"] == pytest.approx(np.std(diff, ddof=1), abs=1e-12)
        assert (stat["wins"], stat["reps"]) == (sum(d < 0 for d in diff), 2)
    assert set(res["shipped"]) >= {"iabma", "moe_tuned", "iabma_lambda0"}
    assert all(len(g) == 2 and set(g) <= {"network", "stacking"} for g in res["shipped"].values())
    assert res["shipped"]["iabma"] == ["network", "network"]  # the simulation needs the input
    assert all(c["kl_weight"] == 0.0 for c in res["chosen"]["moe_tuned"])
    schema = json.loads((simulation_run.out / "results.schema.json").read_text())
    assert schema["$defs"]["ClassificationResults"]["additionalProperties"] is False


def test_scores_are_sane_and_the_rows_differ(simulation_run) -> None:
    m = simulation_run.results["methods"]
    for name, s in m.items():
        assert 0.5 < s["accuracy"]["mean"] <= 1.0, name
        assert 0.0 <= s["ece"]["mean"] < 0.5, name
    # The simulation's experts are strong in different regions: the best adaptive methods
    # must beat the plain average, and OOF IA-BMA must beat the paper-literal one.
    assert m["moe"]["nll"]["mean"] < m["uniform"]["nll"]["mean"]
    assert m["iabma"]["nll"]["mean"] < m["iabma_paper"]["nll"]["mean"]
    for s in m["uniform"].values():
        assert s["sd"] > 0  # two repetitions on different seeds


def test_details_and_markdown_carry_the_rest(simulation_run) -> None:
    d = simulation_run.details
    assert d["settings"]["evidence"]["iabma"] == "oof"
    assert d["settings"]["evidence"]["iabma_paper"] == "in_sample"
    assert [r["seed"] for r in d["reps"]] == [0, 1]
    assert len(d["per_rep"]["dla"]) == 2 and "ece10" in d["per_rep"]["dla"][0]
    assert len(d["selected"]["iabma"]) == 2
    assert d["selected"]["iabma_paper"][0]["kl_weight"] == pytest.approx(0.05)
    paper = d["params"]["iabma_paper"]
    assert (paper["energy_reduction"], paper["objective"]) == ("sum", "elbo")
    # The paper trains a fixed 10 epochs and mixes at temperature 1: no inner-split choices.
    assert (paper["temperature"], paper["early_stopping"]) == (None, False)
    assert d["selected"]["iabma_paper"][0]["epochs"] == 10
    assert d["temperature"]["iabma_paper"] == 1.0
    assert np.allclose([sum(w) for w in d["mean_weights"].values()], 1.0)
    md = (simulation_run.out / "results.md").read_text()
    assert "--paper-literal: off" in md and md.count("**") >= 8
    assert "| simulation | accuracy (↑) |" in simulation_run.proc.stdout  # table printed


@pytest.mark.parametrize("name", ["reliability.png", "weights.png", "weight_fields.png"])
def test_plots_are_written_as_real_pngs(simulation_run, name: str) -> None:
    path = simulation_run.out / name
    width, height = png_size(path)
    assert width >= 600 and height >= 300
    assert path.stat().st_size > 20_000  # drawn panels, not an empty canvas


def test_paper_literal_makes_iabma_the_paper_setting(tmp_path, bench_cache) -> None:
    res = run_quality(
        "simulation", 1, load_config(None), tmp_path, methods=["iabma", "iabma_paper", "moe"],
        paper_literal=True, cache_dir=bench_cache, progress=False,
    )  # fmt: skip
    assert res["methods"]["iabma"] == res["methods"]["iabma_paper"]
    details = json.loads((tmp_path / "details.json").read_text())
    assert set(details["settings"]["evidence"].values()) == {"in_sample"}
    assert details["params"]["iabma"]["energy_reduction"] == "sum"
    assert "--paper-literal: on" in (tmp_path / "results.md").read_text()
    # The appendix's experts: two copies of the fixed soft circle, no fitted one.
    assert details["experts"] == ["poly2", "poly3", "lda", "circle", "circle_b"]
    assert details["settings"]["config"]["protocol"]["simulation_circles"] == "paper"


def test_the_paper_literal_circles_are_the_same_fixed_model() -> None:
    from training.datasets import simulate
    from training.experts.defaults import simulation_experts

    data = simulate(400, 0)
    X, y = data.X, data.y
    ours = [e.model.fit(X, y).predict_proba(X) for e in simulation_experts()[3:]]
    paper = [e.model.fit(X, y).predict_proba(X) for e in simulation_experts(True)[3:]]
    np.testing.assert_array_equal(paper[0], paper[1])
    np.testing.assert_array_equal(paper[0], ours[0])
    assert np.abs(ours[0] - ours[1]).max() > 0.05  # the default's second circle is fitted


def test_config_overrides_take_effect(tmp_path, bench_cache) -> None:
    def dla(config_text: str | None, out: Path) -> tuple[dict, dict]:
        path = None
        if config_text is not None:
            path = tmp_path / "override.json"
            path.write_text(config_text)
        res = run_quality(
            "simulation", 1, load_config(path), out, methods=["dla"],
            cache_dir=bench_cache, progress=False,
        )  # fmt: skip
        return res["methods"]["dla"], json.loads((out / "details.json").read_text())

    default, d0 = dla(None, tmp_path / "a")
    changed, d1 = dla('{"dla": {"k": 7}}', tmp_path / "b")
    assert d0["params"]["dla"]["k"] == 50 and d1["params"]["dla"]["k"] == 7
    assert changed["nll"]["mean"] != default["nll"]["mean"]
