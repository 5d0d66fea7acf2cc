"""A refit staged beside the served version, scored in shadow on live traffic, and promoted
on the realised outcomes: through the real app, trail, onnxruntime and CLI."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.bundle.pointer import current, history
from app.bundle.staged import evidence_log, staged
from app.cli.main import main
from tests.support.bundles import check_contract, instances, make_settings
from tests.support.console import check_page
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape
from tests.support.outcomes import drawn_from
from tests.support.services import wait_for
from tests.training.refit.conftest import PER_REQUEST, TRUTH, RegWorld, World
from training.datasets import simulate

TOKEN = "shadow-live-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def recomputed(db: Path, classes: list[Any], staged_version: str) -> tuple[np.ndarray, np.ndarray]:
    """Served and staged NLL of every paired outcome row, read from the trail by hand."""
    con = sqlite3.connect(db)
    shadow: dict[str, tuple[np.ndarray, int]] = {}
    query = "SELECT request_ids, rows, answer, m FROM iabma_shadow WHERE staged = ? ORDER BY id"
    for ids, counts, blob, m in con.execute(query, (staged_version,)):
        table = np.frombuffer(blob, "<f8").reshape(-1, m + len(classes))
        starts = np.cumsum([0, *np.frombuffer(counts, "<i4")])
        for k, rid in enumerate(ids.split("\n")):
            shadow.setdefault(rid, (table[starts[k] : starts[k + 1]], m))
    rows = con.execute(
        "SELECT request_id, row_index, outcome, scores FROM iabma_outcomes ORDER BY id"
    ).fetchall()
    con.close()
    served, mine = [], []
    keys = [str(c) for c in classes]
    for rid, row, outcome, scores in rows:
        if rid not in shadow:
            continue
        table, m = shadow[rid]
        p = table[row, m + keys.index(str(json.loads(outcome)))]
        served.append(np.frombuffer(scores, "<f8")[0])
        mine.append(-math.log(max(p, 1e-300)))
    return np.array(served), np.array(mine)


def serve(app: AsgiHarness, rows: list[dict[str, Any]], prefix: str, rng: Any) -> list[Any]:
    """Serve ``rows`` in requests of PER_REQUEST, post outcomes drawn from TRUTH; return
    the answers."""
    label, answers = drawn_from(TRUTH, rng), []
    for k in range(0, len(rows), PER_REQUEST):
        rid = f"{prefix}{k // PER_REQUEST}"
        body = {"instances": rows[k : k + PER_REQUEST]}
        r = app.post("/predict", json=body, headers={"X-Request-ID": rid})
        assert r.status_code == 200, r.text
        answers += r.json()["predictions"]
        outcomes = [
            {"request_id": rid, "row": i, "outcome": label(item)}
            for i, item in enumerate(r.json()["predictions"])
        ]
        assert app.post("/feedback", json={"outcomes": outcomes}).status_code == 200
    return answers


def live(store: Path, url: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["promote", "--store", str(store), "--name", "demo", "--if-better-live",
                 "--audit-url", url, *args])  # fmt: skip
    return code, capsys.readouterr().out


def test_a_staged_refit_is_scored_in_shadow_and_promoted_on_live_evidence(
    world: World, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trail = tmp_path / "trail"
    trail.mkdir()
    shutil.copy(world.full_url.removeprefix("sqlite:///"), trail / "audit.db")
    url = f"sqlite:///{trail / 'audit.db'}"
    root = store / "demo"
    common = ["--store", str(store), "--name", "demo", "--audit-url", url]
    code = main(["refit", "--quiet", *common, "--combiner", "stacking", "--stage"])
    out = capsys.readouterr().out
    assert code == 0, out
    v2 = staged(root)
    assert v2 is not None and v2 != world.version and current(root) == world.version
    assert "STAGED" in out

    probe = instances(simulate(40, 99).X)
    settings = make_settings(store, trail, admin_token=TOKEN, audit_payload="full")
    with AsgiHarness(settings) as app:
        shadow = app.service.shadow
        assert shadow.gate is not None and shadow.gate.version == v2 and shadow.gate.gate_only
        assert main(["unstage", "--store", str(store), "--name", "demo"]) == 0
        app.post("/admin/reload", headers=AUTH)
        assert shadow.gate is None
        alone = app.post("/predict", json={"instances": probe}).json()["predictions"]
        assert main(["stage", "--store", str(store), "--name", "demo", v2]) == 0
        app.post("/admin/reload", headers=AUTH)
        assert shadow.gate is not None and shadow.gate.version == v2
        # The served answers while v2 is staged are those with nothing staged, exactly.
        assert app.post("/predict", json={"instances": probe}).json()["predictions"] == alone

        rng = np.random.default_rng(5)
        rows = instances(simulate(1200, 11).X)
        serve(app, rows[:100], "early", rng)
        wait_for(shadow.idle, 10, "the shadow to keep every request")
        code, out = live(store, url, capsys, "--min-rows", "1000")
        assert code == 3 and "only 100 outcome rows" in out and current(root) == world.version

        answers = serve(app, rows[100:], "late", rng)
        assert len(answers) == 1100
        wait_for(shadow.idle, 10, "the shadow to keep every request")
        body = app.get("/performance?compare=staged").json()
        check_contract(app, "Performance", body)
        block = body["staged"]
        samples, _ = scrape(app)
        page = app.get("/audit/performance")
        assert page.status_code == 200, page.text
        doc = check_page(page.text)
        summary = doc.find(".//p[@id='staged-summary']")
        assert summary is not None and summary.get("data-rows") == "1200"
        assert doc.find(".//*[@id='staged-chart']") is not None
        assert len(doc.findall(".//table[@id='staged-table']/tbody/tr")) == len(block["over_time"])
    manifest = json.loads((root / world.version / "manifest.json").read_text())
    classes = list(manifest["target"]["classes"])
    served_nll, staged_nll = recomputed(trail / "audit.db", classes, v2)
    diff = staged_nll - served_nll
    assert block["rows"] == len(diff) == 1200
    assert block["served_nll"] == pytest.approx(served_nll.mean(), abs=1e-6)
    assert block["staged_nll"] == pytest.approx(staged_nll.mean(), abs=1e-6)
    assert block["nll_diff"] == pytest.approx(diff.mean(), abs=1e-6)
    se = diff.std(ddof=1) / math.sqrt(len(diff))
    assert block["paired_se"] == pytest.approx(se, abs=1e-6)
    assert block["weight_drift"]["rows"] >= 1240 and set(block["weight_drift"]["psi"]) >= {TRUTH}
    assert sum(b["rows"] for b in block["over_time"]) == 1200
    rows_metric = [v for lab, v in samples["iabma_shadow_rows"] if lab["staged_version"] == v2]
    assert rows_metric == [1200.0]
    assert "iabma_shadow_nll_diff" in samples

    assert -block["nll_diff"] > block["paired_se"], block  # outcomes follow lda: v2 is better
    code, out = live(store, url, capsys, "--min-rows", "1000")
    assert code == 0, out
    assert current(root) == v2 and history(root)[-1] == v2 and staged(root) is None
    (entry,) = evidence_log(root)
    assert entry["to"] == v2 and entry["from"] == world.version and entry["rows"] == 1200
    assert entry["nll_diff"] == pytest.approx(block["nll_diff"], abs=1e-9)


def test_the_live_rule_needs_the_rows_and_an_advantage_beyond_its_se() -> None:
    from app.cli.stage import decide

    block = {"rows": 500, "nll_diff": -0.01, "paired_se": 0.02}
    assert "does not exceed its paired SE" in str(decide(block, 100))
    assert decide({**block, "nll_diff": -0.05}, 100) is None
    assert "only 500 outcome rows" in str(decide({**block, "nll_diff": -0.05}, 501))
    assert "does not exceed" in str(decide({**block, "nll_diff": 0.05, "paired_se": 0.0}, 2))
    assert "float rounding" in str(decide({**block, "nll_diff": -8e-10, "paired_se": 5e-10}, 2))


def test_an_added_expert_is_shadowed_by_the_staged_graph_on_regression(
    reg_world: RegWorld, reg_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refit with an expert the served version lacks runs its own fused graph; its
    staged NLL is the mixture of that graph's answer, in the target's units."""
    from app.bundle.loader import open_bundle
    from app.bundle.normal import gaussian_logpdf
    from app.bundle.predictor import BundlePredictor

    trail = tmp_path / "trail"
    trail.mkdir()
    shutil.copy(reg_world.full_url.removeprefix("sqlite:///"), trail / "audit.db")
    url = f"sqlite:///{trail / 'audit.db'}"
    common = ["--store", str(reg_store), "--name", "reg", "--audit-url", url]
    added = f"gbm={reg_world.added}"
    assert main(["refit", "--quiet", *common, "--add-expert", added, "--stage"]) == 0, (
        capsys.readouterr()
    )
    v2 = staged(reg_store / "reg")
    assert v2 is not None
    rows = [row for rid in ("q0", "q1", "q2") for row in reg_world.sent[rid]]
    y = np.asarray(reg_world.y[: len(rows)])
    with AsgiHarness(make_settings(reg_store, trail, "reg")) as app:
        shadow = app.service.shadow
        assert shadow.gate is not None and not shadow.gate.gate_only
        r = app.post("/predict", json={"instances": rows}, headers={"X-Request-ID": "s0"})
        assert r.status_code == 200, r.text
        outcomes = [{"request_id": "s0", "row": i, "outcome": float(v)} for i, v in enumerate(y)]
        assert app.post("/feedback", json={"outcomes": outcomes}).status_code == 200
        wait_for(shadow.idle, 10, "the shadow to keep the request")
        block = app.get("/performance?compare=staged").json()["staged"]
    assert block["rows"] == len(rows) and block["version"] == v2
    bundle = open_bundle(reg_store / "reg" / v2)
    m = bundle.manifest
    X = pd.DataFrame(rows)
    feeds = {f.input: np.asarray(X[f.name], np.float32)[:, None] for f in m.features}
    pred = BundlePredictor(bundle).predict(feeds, interval=False)
    assert pred.expert_means is not None
    sds = np.array([e.sigma for e in m.experts]) * m.target.scale * m.mixture.temperature
    lp = np.log(pred.weights) + gaussian_logpdf(y[:, None], pred.expert_means, sds)
    top = lp.max(axis=1)
    nll = -(top + np.log(np.exp(lp - top[:, None]).sum(axis=1)))
    assert block["staged_nll"] == pytest.approx(nll.mean(), rel=1e-5)
