"""``GET /weights``: a past record, the gate's weights for an input now, or a page of records.

The query decides the mode: ``request_id`` alone returns the stored record; every feature
runs the gate only; otherwise ``since``, ``until`` (ISO-8601, naive is UTC), ``expert``,
``limit`` (1-1000, default 100) and ``cursor`` select records, newest first, with each
expert's mean weight and argmax share over all that match.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from app.audit.write.trail_db import RecordFilter, decode_cursor
from app.core.context import REQUEST_ID
from app.core.inputs import query_row
from app.core.plane import check_finite
from app.core.service import Service
from app.errors import Fault, InvalidInput, NotFound

LISTING = ("since", "until", "expert", "limit", "cursor")
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def single_params(items: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The query as a mapping; a parameter given twice is refused, naming it."""
    params: dict[str, str] = {}
    twice = []
    for key, value in items:
        if key in params:
            twice.append(key)
        params[key] = value
    if twice:
        raise InvalidInput(
            [Fault("duplicate_parameter", k, "given more than once") for k in sorted(set(twice))]
        )
    return params


def parse_time_us(name: str, text: str) -> int:
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            [Fault("invalid_value", name, f"expected an ISO-8601 time, got {text!r}")]
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    try:
        stamp.astimezone(UTC)  # 0001-01-01T00:00+01:00 is in the year 0 there
    except OverflowError:
        raise InvalidInput(
            [Fault("invalid_value", name, f"{text!r} is outside the years 1 to 9999 in UTC")]
        ) from None
    delta = stamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    # isdigit alone also passes "²", which int() refuses; and int() refuses more digits than
    # sys.get_int_max_str_digits() with a ValueError, so no more are read than MAX_LIMIT has.
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_LIMIT))
    if not digits or not 1 <= int(text) <= MAX_LIMIT:
        raise InvalidInput(
            [
                Fault(
                    "invalid_value",
                    "limit",
                    f"expected an integer from 1 to {MAX_LIMIT}, got {text!r}",
                )
            ]
        )
    return int(text)


async def weights(
    service: Service, items: Sequence[tuple[str, str]], request_id: str
) -> dict[str, Any]:
    model = service.runtime.require()
    params = single_params(items)
    keys = set(params)
    features = set(model.features.names)
    # Feature names may be any text, "limit" or "request_id" included: a query naming every
    # feature is a gate probe, and only then do those words stop meaning their usual thing.
    if keys and keys >= features:
        return _gate(service, params, request_id)
    if keys == {"request_id"} or ("request_id" in keys and not keys <= set(LISTING) | features):
        return await _record(service, params)
    if keys & features and not keys <= set(LISTING):
        return _gate(service, params, request_id)
    unknown = sorted(keys - set(LISTING))
    if unknown:
        raise InvalidInput(
            [
                Fault(
                    "unknown_parameter",
                    k,
                    "unknown query parameter; give request_id, the features "
                    f"({model.features.names_text}), or {', '.join(LISTING)}",
                )
                for k in unknown
            ]
        )
    return await _page(service, params)


async def _record(service: Service, params: dict[str, str]) -> dict[str, Any]:
    others = sorted(set(params) - {"request_id"})
    if others:
        raise InvalidInput(
            [
                Fault("conflicting_parameter", k, "cannot be combined with request_id")
                for k in others
            ]
        )
    rid = params["request_id"]
    if not REQUEST_ID.match(rid):
        raise InvalidInput(
            [Fault("invalid_value", "request_id", "must be 1-128 letters, digits or ._:/+=-")]
        )
    store = service.require_store()
    record = await service.read_store(store.find, rid)
    if record is None:
        raise NotFound(f"no audit record with request id {rid!r}", field="request_id")
    return record


def _gate(service: Service, params: dict[str, str], request_id: str) -> dict[str, Any]:
    model = service.runtime.require()
    table = model.features
    columns = table.columns([query_row(params, table)], lambda _i, name: name)
    pred = model.predictor.predict(columns, interval=False)
    check_finite(model, pred, lambda _i: "query")
    service.metrics.observe_graphs((model.name, model.version), {"ensemble": pred.seconds})
    w = pred.weights
    row = w[0].tolist()
    return {
        "model": model.name,
        "version": model.version,
        "request_id": request_id,
        "weights": dict(zip(model.experts, row, strict=True)),
        "top_expert": model.experts[max(range(len(row)), key=row.__getitem__)],
    }


async def _page(service: Service, params: dict[str, str]) -> dict[str, Any]:
    model = service.runtime.require()
    since = parse_time_us("since", params["since"]) if "since" in params else None
    until = parse_time_us("until", params["until"]) if "until" in params else None
    if since is not None and until is not None and since >= until:
        raise InvalidInput([Fault("invalid_value", "until", "must be later than since")])
    expert = params.get("expert")
    if expert is not None and expert not in model.experts:
        raise InvalidInput(
            [
                Fault(
                    "unknown_expert",
                    "expert",
                    f"unknown expert {expert!r}; known: {', '.join(model.experts)}",
                )
            ]
        )
    cursor = decode_cursor(params["cursor"]) if "cursor" in params else None
    flt = RecordFilter(
        model=model.name,
        since_us=since,
        until_us=until,
        expert=expert,
        limit=_limit(params.get("limit")),
        cursor=cursor,
    )
    store = service.require_store()
    records, next_cursor = await service.read_store(store.page, flt)
    aggregate = await service.read_store(store.aggregate, flt)
    return {
        "model": model.name,
        "filter": {
            "since": params.get("since"),
            "until": params.get("until"),
            "expert": expert,
            "limit": flt.limit,
        },
        "records": records,
        "next_cursor": next_cursor,
        "aggregate": aggregate,
    }
