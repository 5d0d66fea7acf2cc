"""``iabma refit --since auto``: the rows after the change point of the realised NLL that
GET /performance suggests, on the covariate-shift replay; no change is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main
from tests.support.bundles import make_settings
from tests.support.harness import AsgiHarness
from tests.support.shift import Shift, part, shifted_bundle

PER = 50


def served(shift: Shift, trail: Path, before: int, after: int) -> str:
    """Serve ``before`` rows inside the training part and ``after`` outside, with their
    outcomes; return the change point's time /performance suggests (or None)."""
    rows, y = part(before, 21, inside=True)
    if after:
        moved, y_moved = part(after, 22, inside=False)
        rows, y = rows + moved, y + y_moved
    settings = make_settings(shift.store, trail, "shift", audit_payload="full")
    with AsgiHarness(settings) as app:
        for k in range(0, len(rows), PER):
            rid = f"q{k // PER}"
            r = app.post(
                "/predict", json={"instances": rows[k : k + PER]}, headers={"X-Request-ID": rid}
            )
            assert r.status_code == 200, r.text
            got = [
                {"request_id": rid, "row": i, "outcome": v} for i, v in enumerate(y[k : k + PER])
            ]
            assert app.post("/feedback", json={"outcomes": got}).status_code == 200
        point = app.get("/performance").json()["change_point"]
    return point and point["served_at"]


def test_since_auto_refits_on_the_rows_after_the_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shift = shifted_bundle(tmp_path / "bundle")
    at = served(shift, tmp_path / "trail", 400, 400)
    assert at is not None
    capsys.readouterr()  # the server's own log lines
    url = f"sqlite:///{tmp_path / 'trail' / 'audit.db'}"
    args = ["refit", "--quiet", "--store", str(shift.store), "--name", "shift", "--audit-url", url]
    code = main([*args, "--since", "auto", "--no-publish"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"--since {at}" in out
    rows_after = int(out.split("then ")[1].split(" at ")[0].replace(",", ""))
    assert abs(rows_after - 400) <= 100
    assert f"on {rows_after:,} outcome rows" in out
    new = json.loads((Path(out.split("staged ")[1].split(";")[0]) / "manifest.json").read_text())
    held = new["training"]["refit"]["n_held_out"]
    reference = new["performance_reference"]
    assert reference["rows"] == held and set(reference["nll"]) == {"_mixture", "lda", "logit"}
    gate = new["gate"]["combiner"]
    assert reference["nll"]["_mixture"]["mean"] == pytest.approx(new["metrics"][gate]["nll"])
    for e in new["experts"]:  # the bundle page's experts: on the same held-out rows
        assert e["metrics"]["nll"] == pytest.approx(reference["nll"][e["name"]]["mean"])


def test_since_auto_without_a_change_names_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shift = shifted_bundle(tmp_path / "bundle")
    assert served(shift, tmp_path / "trail", 400, 0) is None
    capsys.readouterr()  # the server's own log lines
    url = f"sqlite:///{tmp_path / 'trail' / 'audit.db'}"
    args = ["refit", "--quiet", "--store", str(shift.store), "--name", "shift", "--audit-url", url]
    code = main([*args, "--since", "auto"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--since='auto' found no change" in err
