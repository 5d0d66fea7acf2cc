"""Outcomes read back with their inputs (app.audit.read.labelled), on SQLite and PostgreSQL,
from a trail the real app wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sqlalchemy import create_engine

from app.audit.read.labelled import input_hmac, labelled_rows
from tests.support.bundles import TEST_HASH_KEY, Bundles
from tests.support.outcomes import drawn_from, serve_with_outcomes
from tests.support.trail import Trail


def test_full_inputs_come_back_row_by_row_in_order(
    bundles: Bundles, trail: Trail, tmp_path: Path
) -> None:
    rows = bundles.demo.instances(list(range(30)))
    label = drawn_from("lda", np.random.default_rng(0))
    sent = serve_with_outcomes(
        bundles.store, tmp_path, rows, label, audit_url=trail.url, audit_payload="full",
        per_request=12,
    )  # fmt: skip
    engine = create_engine(trail.url)
    try:
        got, inputs = labelled_rows(engine, "demo")
        assert [(r.request_id, r.row) for r in got] == [
            (rid, i) for rid, batch in sent.items() for i in range(len(batch))
        ]
        assert {r.version for r in got} == {bundles.demo.version}
        assert all(r.experts == tuple(bundles.demo.est.expert_names_) for r in got)
        assert all(r.outcome in (0, 1) for r in got)
        for r in got:
            kept = inputs[r.record_id]
            assert kept.mode == "full" and kept.request_id == r.request_id
            assert kept.instances is not None
            assert kept.instances[r.row] == sent[r.request_id][r.row]
        middle = got[12].record_us
        assert len(labelled_rows(engine, "demo", since_us=middle)[0]) == 18
        assert len(labelled_rows(engine, "demo", until_us=middle)[0]) == 12
        assert labelled_rows(engine, "demo", version="other")[0] == []
        assert labelled_rows(engine, "credit")[0] == []
    finally:
        engine.dispose()


def test_hashed_inputs_keep_the_writers_keyed_hash(
    bundles: Bundles, trail: Trail, tmp_path: Path
) -> None:
    rows = bundles.demo.instances(list(range(10)))
    label = drawn_from("poly3", np.random.default_rng(1))
    sent = serve_with_outcomes(
        bundles.store, tmp_path, rows, label, audit_url=trail.url, audit_payload="hash",
        audit_hash_key=TEST_HASH_KEY, per_request=5,
    )  # fmt: skip
    engine = create_engine(trail.url)
    try:
        got, inputs = labelled_rows(engine, "demo")
    finally:
        engine.dispose()
    assert len(got) == 10
    key = TEST_HASH_KEY.encode()
    for rid, batch in sent.items():
        (kept,) = [k for k in inputs.values() if k.request_id == rid]
        assert kept.mode == "hash" and kept.instances is None and kept.n_instances == 5
        assert kept.hmac_sha256 == input_hmac(key, batch)
        assert kept.hmac_sha256 != input_hmac(key, batch[::-1])
