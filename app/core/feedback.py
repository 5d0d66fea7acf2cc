"""``POST /feedback``: outcomes for rows of past predictions, checked, scored and stored.

The body's keys and defaults are the contract's (:mod:`app.contract.feedback`). All or
nothing: every fault is reported, named ``outcomes[i].<field>``, and nothing is stored. A
request id names one audit record of the model (an id an older trail holds twice names
none: 409; an archived one answers 410); an outcome is read as that record's task says
(:mod:`app.core.outcomes`) and scored against what was served (:mod:`app.audit.read.scores`).
The store says which rows had the outcome already (duplicates) or another one (a 409).
Each outcome keeps who posted it (:func:`poster_of`) and when.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.audit.read import scores
from app.audit.store.records import now_us
from app.audit.write import outcome_rows
from app.audit.write.trail_db import AuditStore
from app.bundle.normalise import Normaliser
from app.contract.feedback import FEEDBACK_KEYS, OUTCOME_DEFAULTS, OUTCOME_KEYS, OUTCOME_REQUIRED
from app.contract.request import REQUEST_ID
from app.core.inputs import json_type
from app.core.outcomes import Classes, OutcomeRange, outcome_range, read_outcome
from app.core.service import Service
from app.errors import (
    Archived,
    Fault,
    InvalidInput,
    OutcomeConflict,
    ServingError,
    TooManyRows,
)

MAX_FAULTS = 20


@dataclass(frozen=True)
class Item:
    at: int  # its position in the body
    request_id: str
    row: int
    outcome: Any  # as sent


def _field(at: int, name: str = "") -> str:
    return f"outcomes[{at}].{name}" if name else f"outcomes[{at}]"


def decode(body: Any, max_rows: int) -> list[Item]:
    """The body's items, each well formed, or every fault found (up to 20)."""
    if not isinstance(body, dict):
        raise InvalidInput.one(
            "wrong_type", "body", f'expected an object {{"outcomes": [...]}}, got {json_type(body)}'
        )
    unknown = [k for k in body if k not in FEEDBACK_KEYS]
    if unknown:
        raise InvalidInput(
            [Fault("unknown_field", k, "unknown field; the body takes outcomes") for k in unknown]
        )
    items = body.get("outcomes")
    if items is None:
        raise InvalidInput.one("missing_field", "outcomes", "missing; send an array of outcomes")
    if not isinstance(items, list):
        raise InvalidInput.one(
            "wrong_type", "outcomes", f"expected an array of objects, got {json_type(items)}"
        )
    if not items:
        raise InvalidInput.one("empty_batch", "outcomes", "empty; send at least one outcome")
    if len(items) > max_rows:
        raise TooManyRows(
            f"{len(items)} outcomes exceed the limit of {max_rows} (IABMA_MAX_BATCH_ROWS)",
            field="outcomes",
        )
    faults: list[Fault] = []
    out = []
    for at, raw in enumerate(items):
        found = _item(at, raw)
        if isinstance(found, Item):
            out.append(found)
        else:
            faults += found
        if len(faults) >= MAX_FAULTS:
            break
    if faults:
        raise InvalidInput(faults[:MAX_FAULTS])
    return out


_KEYS = frozenset(OUTCOME_KEYS)


def _item(at: int, raw: Any) -> Item | list[Fault]:
    if type(raw) is dict and "outcome" in raw and raw.keys() <= _KEYS:  # the usual item
        rid, row = raw.get("request_id"), raw.get("row", 0)
        if type(rid) is str and type(row) is int and row >= 0 and REQUEST_ID.match(rid):
            return Item(at, rid, row, raw["outcome"])
    if not isinstance(raw, dict):
        return [Fault("wrong_type", _field(at), f"expected an object, got {json_type(raw)}")]
    keys = ", ".join(OUTCOME_KEYS)
    faults = [
        Fault("unknown_field", _field(at, k), f"unknown field; an outcome takes {keys}")
        for k in raw
        if k not in OUTCOME_KEYS
    ]
    faults += [
        Fault("missing_field", _field(at, k), "missing") for k in OUTCOME_REQUIRED if k not in raw
    ]
    rid = raw.get("request_id")
    if "request_id" in raw and not (isinstance(rid, str) and REQUEST_ID.match(rid)):
        faults.append(
            Fault(
                "invalid_value",
                _field(at, "request_id"),
                f"expected a request id (1-128 letters, digits or ._:/+=-), got {json_type(rid)}",
            )
        )
    row = raw.get("row", OUTCOME_DEFAULTS["row"])
    if isinstance(row, bool) or not isinstance(row, int) or row < 0:
        faults.append(
            Fault(
                "invalid_value",
                _field(at, "row"),
                f"expected an integer >= 0, got {json_type(row)}",
            )
        )
    if faults or not isinstance(rid, str):
        return faults
    return Item(at, rid, row, raw["outcome"])


@dataclass(frozen=True)
class Ingested:
    """What one body did: rows newly stored (and their scores), and repeats."""

    scored: list[scores.Scored]
    accepted: list[list[int]]  # per scored group, its rows that were stored
    duplicates: dict[str, int]  # per version, outcomes stored before with the same value


def ingest(
    store: AuditStore,
    model: str,
    items: Sequence[Item],
    rule: Normaliser,
    bounds: OutcomeRange | None = None,
    poster: str | None = None,
) -> Ingested:
    """Check ``items`` against their records, score them and store them (blocking)."""
    engine = store.engine
    found = outcome_rows.served(engine, store.versions, model, [i.request_id for i in items])
    kept, repeats = _check(model, items, found, rule, bounds)
    records = found.records
    rows = [(records[i.request_id], i.row, value) for i, value, _ in kept]
    scored = scores.score(rows)
    batch: list[outcome_rows.NewOutcome | None] = [None] * len(kept)
    for group in scored:
        for k, pick in enumerate(group.picks):
            item, _, text = kept[pick]
            batch[pick] = outcome_rows.NewOutcome(
                item.request_id,
                item.row,
                text,
                records[item.request_id],
                group.weights[k].tobytes(),
                group.scores[k].tobytes(),
            )
    full = [b for b in batch if b is not None]
    stored = outcome_rows.store(
        engine, model, full, now_us(), store.outcome_growth, store.outcome_chains, poster
    )
    if stored.conflicts:
        raise OutcomeConflict(
            [
                Fault(
                    "conflicting_outcome",
                    _field(kept[k][0].at, "outcome"),
                    f"row {kept[k][0].row} of request {kept[k][0].request_id!r} already has "
                    f"the outcome {before}; an outcome is never changed, and nothing of this "
                    "body was stored",
                )
                for k, before in stored.conflicts[:MAX_FAULTS]
            ]
        )
    duplicates = dict(repeats)
    for k in stored.duplicates:
        version = full[k].record.version
        duplicates[version] = duplicates.get(version, 0) + 1
    new = set(stored.accepted)
    accepted = [[k for k, pick in enumerate(g.picks) if pick in new] for g in scored]
    return Ingested(scored, accepted, duplicates)


def _unbound(model: str, item: Item, found: outcome_rows.Found) -> Fault | None:
    """Why ``item``'s request id names no one record of ``model``, if it names none."""
    rid, where = item.request_id, _field(item.at, "request_id")
    if rid in found.ambiguous:
        return Fault(
            "ambiguous_request",
            where,
            f"{found.ambiguous[rid]} predictions of model {model!r} were audited under this "
            "request id (a trail written before request ids were unique); an outcome for it "
            "cannot be bound to one of them, and is refused",
        )
    if rid in found.archived:
        return Fault(
            "archived",
            where,
            f"the audit record of this request was archived in the Parquet files of "
            f"{found.archived[rid]} (iabma audit-archive); it takes no outcome now",
        )
    if rid in found.unreadable:
        return Fault(
            "not_scorable",
            where,
            "the audit record of this request cannot be read as the server wrote it; "
            "check the trail with iabma audit-verify",
        )
    if rid not in found.records:
        return Fault(
            "unknown_request",
            where,
            f"no prediction of model {model!r} was audited under this request id",
        )
    return None


def _refuse(faults: list[Fault]) -> None:
    """Raise the error for ``faults``: 409 if each is a request id that names several
    records, 410 if each names an archived one, else 422 listing them all."""
    if not faults:
        return
    shown = faults[:MAX_FAULTS]
    codes = {f.code for f in faults}
    if codes == {"ambiguous_request"}:
        raise OutcomeConflict(shown)
    if codes == {"archived"}:
        err = Archived(shown[0].message, shown[0].field)
        err.faults = shown
        raise err
    raise InvalidInput(shown)


def _check(
    model: str,
    items: Sequence[Item],
    found: outcome_rows.Found,
    rule: Normaliser,
    bounds: OutcomeRange | None,
) -> tuple[list[tuple[Item, float, str]], dict[str, int]]:
    """Each item's outcome as a class index or a number, with its canonical text; and, per
    version, the items that repeat an earlier item of the body."""
    faults: list[Fault] = []
    kept: list[tuple[Item, float, str]] = []
    seen: dict[tuple[str, int], tuple[int, str]] = {}
    repeats: dict[str, int] = {}
    labels: dict[str, Classes] = {}
    for item in items:
        unbound = _unbound(model, item, found)
        if unbound is not None:
            faults.append(unbound)
            continue
        rec = found.records[item.request_id]
        if rec.expert_outputs is None:
            faults.append(
                Fault(
                    "not_scorable",
                    _field(item.at, "request_id"),
                    "this prediction was audited by a release that did not keep the experts' "
                    "own outputs, so its outcome cannot be scored",
                )
            )
            continue
        if item.row >= rec.n:
            last = f"0 to {rec.n - 1}" if rec.n > 1 else "0 only"
            faults.append(
                Fault(
                    "unknown_row",
                    _field(item.at, "row"),
                    f"request {item.request_id!r} has {rec.n} row(s): {last}",
                )
            )
            continue
        read = read_outcome(rec, item.outcome, rule, labels, bounds)
        if isinstance(read, Fault):
            faults.append(Fault(read.code, _field(item.at, "outcome"), read.message))
            continue
        value, text = read
        key = (item.request_id, item.row)
        if key in seen:
            first, before = seen[key]
            if before != text:
                faults.append(
                    Fault(
                        "conflicting_outcome",
                        _field(item.at, "outcome"),
                        f"differs from outcomes[{first}].outcome, for the same request and row",
                    )
                )
            else:
                repeats[rec.version] = repeats.get(rec.version, 0) + 1
            continue
        seen[key] = (item.at, text)
        kept.append((item, value, text))
    _refuse(faults)
    return kept, repeats


_POSTER_LABEL = b"iabma-poster/1"


def poster_of(chain_key: bytes | None, key: str) -> str:
    """How an outcome names the key that posted it: ``key:`` and 12 hex digits of an HMAC
    of the key under one derived from the trail's key. Equal keys give equal names; the
    name tells nothing of the key to whoever reads the trail, even of a short one."""
    derived = hmac.new(chain_key or b"", _POSTER_LABEL, hashlib.sha256).digest()
    digest = hmac.new(derived, key.encode("utf-8"), hashlib.sha256).hexdigest()
    return "key:" + digest[:12]


def poster_for(service: Service, store: AuditStore, key: str | None) -> str | None:
    """The poster to record: the key's name when the feedback route takes keys (the key
    was checked before the body was read), else None (anyone may post)."""
    settings = service.settings
    takes_keys = bool(settings.keys("feedback_keys") or settings.keys("api_keys"))
    if key is None or not takes_keys:
        return None
    return poster_of(store.chain_key, key)


async def feedback(service: Service, body: Any, key: str | None = None) -> dict[str, Any]:
    """Check, score and store the body's outcomes, posted with ``key`` (as presented; the
    access guard checked it); count them in the metrics."""
    model = service.runtime.require()
    labels = (model.name, model.version)
    try:
        items = decode(body, service.settings.max_batch_rows)
        store = service.require_store()
        rule = model.manifest.input_rule.normaliser()
        bounds = outcome_range(model.manifest.target)
        poster = poster_for(service, store, key)
        done: Ingested = await service.read_store(
            ingest, store, model.name, items, rule, bounds, poster
        )
    except ServingError:
        sent = body.get("outcomes") if isinstance(body, dict) else None
        rejected = len(sent) if isinstance(sent, list) else 0
        service.metrics.feedback.inc((*labels, "rejected"), rejected)
        raise
    for group, picks in zip(done.scored, done.accepted, strict=True):
        if picks:
            experts = json.loads(group.experts)
            service.metrics.observe_outcomes(
                (model.name, group.version), experts, group.scores[picks, :, 0]
            )
    for version, n in done.duplicates.items():
        service.metrics.feedback.inc((model.name, version, "duplicate"), n)
    return {
        "accepted": sum(map(len, done.accepted)),
        "duplicates": sum(done.duplicates.values()),
        "poster": poster,
    }
