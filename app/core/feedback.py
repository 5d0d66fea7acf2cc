"""``POST /feedback``: outcomes for rows of past predictions, checked, scored and stored.

The body's keys and defaults are the contract's (:mod:`app.contract.feedback`). All or
nothing: every fault is reported, named ``outcomes[i].<field>``, and nothing is stored. A
request id means the latest audit record with that id, as in ``GET /weights``; an outcome
is read as that record's task says (:mod:`app.core.outcomes`) and scored against what was
served (:mod:`app.audit.scores`). The store says which rows had the outcome already
(duplicates) or another one (a 409).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.audit import outcomes, scores
from app.audit.records import now_us
from app.audit.store import AuditStore
from app.bundle.normalise import Normaliser
from app.contract.feedback import FEEDBACK_KEYS, OUTCOME_DEFAULTS, OUTCOME_KEYS, OUTCOME_REQUIRED
from app.contract.request import REQUEST_ID
from app.core.inputs import json_type
from app.core.outcomes import Classes, read_outcome
from app.core.service import Service
from app.errors import Fault, InvalidInput, OutcomeConflict, ServingError, TooManyRows

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


def ingest(store: AuditStore, model: str, items: Sequence[Item], rule: Normaliser) -> Ingested:
    """Check ``items`` against their records, score them and store them (blocking)."""
    engine = store.engine
    found = outcomes.served(engine, store.versions, model, [i.request_id for i in items])
    kept, repeats = _check(model, items, found, rule)
    rows = [(found[i.request_id], i.row, value) for i, value, _ in kept]
    scored = scores.score(rows)
    batch: list[outcomes.NewOutcome | None] = [None] * len(kept)
    for group in scored:
        for k, pick in enumerate(group.picks):
            item, _, text = kept[pick]
            batch[pick] = outcomes.NewOutcome(
                item.request_id,
                item.row,
                text,
                found[item.request_id],
                group.weights[k].tobytes(),
                group.scores[k].tobytes(),
            )
    full = [b for b in batch if b is not None]
    stored = outcomes.store(engine, model, full, now_us(), store.outcome_growth)
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


def _check(
    model: str, items: Sequence[Item], found: dict[str, scores.Served], rule: Normaliser
) -> tuple[list[tuple[Item, float, str]], dict[str, int]]:
    """Each item's outcome as a class index or a number, with its canonical text; and, per
    version, the items that repeat an earlier item of the body."""
    faults: list[Fault] = []
    kept: list[tuple[Item, float, str]] = []
    seen: dict[tuple[str, int], tuple[int, str]] = {}
    repeats: dict[str, int] = {}
    labels: dict[str, Classes] = {}
    for item in items:
        rec = found.get(item.request_id)
        if rec is None:
            faults.append(
                Fault(
                    "unknown_request",
                    _field(item.at, "request_id"),
                    f"no prediction of model {model!r} was audited under this request id",
                )
            )
            continue
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
        read = read_outcome(rec, item.outcome, rule, labels)
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
    if faults:
        raise InvalidInput(faults[:MAX_FAULTS])
    return kept, repeats


async def feedback(service: Service, body: Any) -> dict[str, int]:
    """Check, score and store the body's outcomes; count them in the metrics."""
    model = service.runtime.require()
    labels = (model.name, model.version)
    try:
        items = decode(body, service.settings.max_batch_rows)
        store = service.require_store()
        rule = model.manifest.input_rule.normaliser()
        done: Ingested = await service.read_store(ingest, store, model.name, items, rule)
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
    return {"accepted": sum(map(len, done.accepted)), "duplicates": sum(done.duplicates.values())}
