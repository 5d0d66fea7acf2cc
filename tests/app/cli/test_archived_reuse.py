"""A request id whose record was archived (``iabma audit-archive --delete``): feedback for
it is a 410, and a new ``/predict`` under it starts a record of its own, to which no
outcome of the archived one attaches, not even one posted while the archive ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.audit import archive
from app.audit.engine import make_engine
from app.audit.records import now_us
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.tampering import KEY
from tests.support.trail import Trail

RID = "reused-7"


def _label(app: AsgiHarness, rows: list[dict[str, Any]]) -> list[int]:
    r = app.post("/predict", json={"instances": rows}, headers={"X-Request-ID": RID})
    assert r.status_code == 200, r.text
    return [p["prediction"]["label"] for p in r.json()["predictions"]]


def _post(app: AsgiHarness, row: int, outcome: int) -> Any:
    return app.post("/feedback", json={"outcomes": [{"request_id": RID, "row": row,
                                                     "outcome": outcome}]})  # fmt: skip


def _archive(app: AsgiHarness, url: str, out: Path, late: int) -> None:
    """Archive every record; ``late`` is posted for row 1 after the files are written and
    before the records are deleted, as a client may while the command runs."""
    engine = make_engine(url, 10.0)
    try:
        before = now_us() + 1_000_000
        written, ends = archive.write(engine, before, out)
        assert (written.records, written.outcomes) == (1, 1)
        assert _post(app, 1, late).status_code == 200
        assert archive.delete_archived(engine, KEY, before, ends, written.outcomes_through) == 1
    finally:
        engine.dispose()


def test_a_new_record_under_an_archived_id_takes_none_of_its_outcomes(
    bundles: Bundles, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'trail' / 'audit.db'}"
    (tmp_path / "trail").mkdir()
    trail = Trail(url, tmp_path / "trail" / "audit.db")
    settings = make_settings(bundles.store, tmp_path, audit_url=url, audit_hash_key=TEST_HASH_KEY)
    rows = bundles.demo.instances([0, 1])
    with AsgiHarness(settings) as app:
        old = _label(app, rows)
        assert _post(app, 0, old[0]).json()["accepted"] == 1
        _archive(app, url, tmp_path / "archive", late=1 - old[1])
        gone = _post(app, 0, old[0])
        assert gone.status_code == 410, gone.text
        assert gone.json()["error"]["field"] == "outcomes[0].request_id"
        # No outcome of the archived record is left in the trail to bind to a new one.
        assert trail.rows("select count(*) from iabma_outcomes")[0][0] == 0
        new = _label(app, rows)
        # Row 1 gets the outcome the archived record's row 1 was posted late, then the
        # other one: each is this record's own, stored, never a duplicate or a conflict.
        first = _post(app, 1, 1 - old[1])
        assert first.status_code == 200 and first.json()["accepted"] == 1, first.text
        assert _post(app, 0, 1 - new[0]).json() == {**first.json(), "accepted": 1}
        (record,) = trail.rows("select id from iabma_audit_log")
        stored = trail.rows("select record_id, row_index from iabma_outcomes order by row_index")
        assert [tuple(r) for r in stored] == [(record[0], 0), (record[0], 1)]
        assert app.get("/weights", params={"request_id": RID}).status_code == 200
        assert app.get("/performance").json()["rows"] == 2
