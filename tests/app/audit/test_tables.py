"""The trail's tables across releases: a trail made before the experts' own outputs were
kept gains their column at start-up, and its older records read back without them."""

from __future__ import annotations

import dataclasses

import numpy as np

from app.audit.store import AuditStore
from tests.support.services import make_record
from tests.support.trail import Trail


def test_an_older_trail_gains_the_experts_column_and_keeps_its_records(trail: Trail) -> None:
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    store.insert([make_record("before-upgrade")])
    store.close()
    # The trail as the previous release left it: no expert_outputs column.
    trail.execute("alter table iabma_audit_log drop column expert_outputs")

    for _ in range(2):  # a second start (or a second worker) finds the column there
        store = AuditStore(trail.url, 10.0)
        store.prepare()
        store.close()
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    served = np.array([[[0.3, 0.7], [0.9, 0.1]]])
    store.insert([dataclasses.replace(make_record("after-upgrade"), expert_outputs=served)])
    old, new = store.find("before-upgrade"), store.find("after-upgrade")
    store.close()

    assert old is not None and new is not None
    assert "experts" not in old["predictions"][0], "an older record has no experts' outputs"
    assert new["predictions"][0]["experts"] == {
        "a": {"label": 1, "probabilities": {"0": 0.3, "1": 0.7}},
        "b": {"label": 0, "probabilities": {"0": 0.9, "1": 0.1}},
    }
