"""Trails to tamper with: records committed in groups as the writer commits them, and
predictions with outcomes posted through the app; and SQL that edits one value."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from app.audit.check.verify import Report, verify
from app.audit.store.chain import chain_key
from app.audit.store.records import now_us
from app.audit.write.trail_db import AuditStore
from tests.support.bundles import TEST_HASH_KEY, Bundles
from tests.support.outcomes import serve_with_outcomes as served_with_outcomes
from tests.support.services import make_record
from tests.support.trail import Trail

KEY = chain_key(TEST_HASH_KEY.encode())


def fill(url: str, groups: int = 3, size: int = 5) -> None:
    """``groups`` group commits of ``size`` records ``g<g>-<i>``, as the writer makes them,
    each record's weights its own."""
    rng = np.random.default_rng(7)
    store = AuditStore(url, 10, KEY)
    store.prepare()
    try:
        for g in range(groups):
            store.insert(
                [
                    dataclasses.replace(
                        make_record(f"g{g}-{i}"),
                        created_us=now_us(),
                        weights=rng.dirichlet([1, 1], size=1),
                    )
                    for i in range(size)
                ]
            )
    finally:
        store.close()


def serve_with_outcomes(
    bundles: Bundles,
    trail: Trail,
    tmp_path: Path,
    n: int = 4,
    name: str = "demo",
    prefix: str = "p",
    **kw: Any,
) -> list[str]:
    """``n`` predictions of two rows through the app (``p0``, ``p1``, ...), the label or
    mean served posted as each row's outcome; the request ids."""
    trained = getattr(bundles, name)
    sent = served_with_outcomes(
        bundles.store, tmp_path, trained.instances(slice(0, 2 * n)), _served, prefix=prefix,
        per_request=2, name=name, audit_url=trail.url, audit_hash_key=TEST_HASH_KEY, **kw,
    )  # fmt: skip
    return list(sent)


def _served(item: dict[str, Any]) -> Any:
    pred = item["prediction"]
    return pred["label"] if "label" in pred else round(pred["mean"], 3)


def check(trail: Trail) -> Report:
    return verify(_engine(trail), KEY)


def _engine(trail: Trail) -> Any:
    from app.audit.store.engine import make_engine

    return make_engine(trail.url, 10.0)


def findings(trail: Trail) -> list[str]:
    engine = _engine(trail)
    try:
        return verify(engine, KEY).findings
    finally:
        engine.dispose()


def other_value(trail: Trail, table: str, column: str, where: str) -> str:
    """SQL for a value of ``column`` other than the one ``where`` selects, of its type."""
    (value,) = trail.rows(f"select {column} from {table} where {where}")[0]
    if value is None:
        return "'1'" if column in ("input_json", "outcome", "poster") else trail.blob(b"\x01" * 32)
    if isinstance(value, bool):
        return "false" if value else "true"
    if isinstance(value, int):
        return f"{column} + 1"
    if isinstance(value, str):
        return f"{column} || ' '"
    # A high bit: flipping the lowest would turn request id g1-2 into g1-3, which another
    # record holds (the unique key refuses the edit before verify could see it).
    return trail.blob(bytes(value)[:-1] + bytes([bytes(value)[-1] ^ 0x40]) if value else b"\x01")
