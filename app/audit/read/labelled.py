"""Outcomes with the inputs they answer: what ``iabma refit`` learns from, and all it
reads from the trail's tables (the rows of excluded posters counted too); blocking reads.

Every stored outcome of a model, joined to the audit record of the prediction it scores:
the outcome row itself, and once per record what the trail kept of its input (the
instances in ``full`` mode, the keyed hash in ``hash`` mode, nothing in ``off``). The
record's columns are decoded here, beside the tables, so that a change of the trail's
storage changes this module and not its readers. An outcome whose record is no longer in
the trail (archived or pruned before outcomes left with their records) is left out, and
counted in a warning: there is no input to learn from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Engine, exists, func, inspect, or_, select

from app.audit.read.outcome_filter import ANONYMOUS, window
from app.audit.store.packing import unpack_request_id
from app.audit.store.records import _hmac, canonical_json
from app.audit.store.tables import outcomes, records
from app.audit.store.version_rows import ReaderVersions

log = logging.getLogger("iabma.audit")


@dataclass(frozen=True)
class LabelledRow:
    """One outcome: the served row it scores and the outcome (a class label or a number)."""

    record_id: int
    request_id: str
    row: int
    record_us: int
    version: str
    experts: tuple[str, ...]
    outcome: Any
    poster: str | None = None  # app.audit.read.outcome_filter: a key's fingerprint, or None


@dataclass(frozen=True)
class RecordInput:
    """What a record kept of its request's input: ``mode`` ``full`` (``instances`` set),
    ``hash`` (``hmac_sha256``, the 32 bytes of the keyed hash of the canonical JSON of the
    instances) or ``off``."""

    request_id: str
    mode: str
    n_instances: int
    hmac_sha256: bytes | None
    instances: list[dict[str, Any]] | None


def labelled_rows(
    engine: Engine,
    model: str,
    since_us: int | None = None,
    until_us: int | None = None,
    version: str | None = None,
    exclude_posters: Sequence[str] = (),
) -> tuple[list[LabelledRow], dict[int, RecordInput]]:
    """The outcomes of ``model`` whose prediction was served in ``[since_us, until_us)``
    (by ``version``), less those posted by ``exclude_posters`` (fingerprints as
    ``GET /performance`` lists them, or ``"anonymous"``), oldest first; and the input of
    each record they belong to, by id."""
    o = outcomes.c
    conditions = window(model, since_us, until_us, version, exclude_posters)
    columns = (o.record_id, o.request_id, o.row_index, o.record_us, o.version, o.experts)
    query = (
        select(*columns, o.outcome, o.poster)
        .where(*conditions)
        .order_by(o.record_us, o.record_id, o.row_index)
    )
    with engine.connect() as conn:
        found: list[Any] = list(conn.execute(query).fetchall())
        ids = sorted({int(row[0]) for row in found})
        inputs = _inputs(conn, ReaderVersions(engine), ids)
    names: dict[str, tuple[str, ...]] = {}
    rows = [
        LabelledRow(
            int(rid),
            req,
            int(k),
            int(us),
            ver,
            names.setdefault(ex, tuple(json.loads(ex))),
            orjson.loads(text),
            poster,
        )
        for rid, req, k, us, ver, ex, text, poster in found
        if int(rid) in inputs
    ]
    if len(rows) < len(found):
        log.warning(
            "%d outcomes of %s belong to records no longer in the trail; left out",
            len(found) - len(rows),
            model,
        )
    return rows, inputs


# Record ids per SELECT: well under SQLite's 32766 bound parameters.
IDS_PER_QUERY = 2000


def holds_outcomes(engine: Engine) -> bool:
    """Whether the trail has an outcomes table at all (a trail older than outcomes has
    none, and a refit reads nothing from it)."""
    return inspect(engine).has_table(outcomes.name)


def excluded_rows(
    engine: Engine,
    model: str,
    since_us: int | None,
    until_us: int | None,
    posters: Sequence[str],
) -> dict[str, int]:
    """How many of the window's outcome rows each of ``posters`` posted: the rows
    ``exclude_posters`` leaves out of :func:`labelled_rows` (which reads only outcomes
    whose record is still in the trail, and so does this count)."""
    if not posters:
        return {}
    c = outcomes.c
    keys = [p for p in posters if p != ANONYMOUS]
    whose = [c.poster.in_(keys)] if keys else []
    if ANONYMOUS in posters:
        whose.append(c.poster.is_(None))
    query = (
        select(c.poster, func.count())
        .where(*window(model, since_us, until_us, None), or_(*whose))
        .where(exists().where(records.c.id == c.record_id))
        .group_by(c.poster)
    )
    with engine.connect() as conn:
        counted: list[Any] = list(conn.execute(query).all())
    found = {ANONYMOUS if p is None else str(p): int(k) for p, k in counted}
    return {p: found.get(p, 0) for p in posters}


def _inputs(conn: Any, versions: ReaderVersions, ids: list[int]) -> dict[int, RecordInput]:
    r = records.c
    out: dict[int, RecordInput] = {}
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY]
        query = select(
            r.id, r.request_id, r.version_id, r.n_instances, r.input_hash, r.input_json
        ).where(r.id.in_(chunk))
        for rid, req, vid, n, digest, text in conn.execute(query):
            instances = orjson.loads(text) if text is not None else None
            out[int(rid)] = RecordInput(
                unpack_request_id(bytes(req)),
                versions.get(int(vid)).input_mode,
                int(n),
                bytes(digest) if digest is not None else None,
                instances,
            )
    return out


def input_hmac(key: bytes, instances: list[dict[str, Any]]) -> bytes:
    """The keyed hash the trail keeps of a request's ``instances`` in ``hash`` mode."""
    return _hmac(key, canonical_json(instances))
