"""What each console page shows, as plain data for its template; no HTTP here.

Filters read the query as ``GET /weights`` reads its listing (``since`` inclusive and
``until`` exclusive as ISO-8601, naive meaning UTC; ``expert``; ``cursor``), plus
``version``; an empty form field means no filter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.audit.write.trail_db import RecordFilter, decode_cursor
from app.bundle.manifest import check_safe_name
from app.console import charts, queries
from app.console.drift import console_drift
from app.console.shadow_view import staged_section
from app.console.versions import stored_versions
from app.contract.request import REQUEST_ID
from app.core import performance as realised
from app.core.runtime import LoadedModel
from app.core.service import Service
from app.core.weights import parse_time_us, single_params
from app.errors import Fault, InvalidInput, NotFound

PAGE_SIZE = 50
FILTERS = ("since", "until", "expert", "version")
# What each page's query may hold; the record page takes a request id instead.
PAGE_PARAMS = {
    "decisions": (*FILTERS, "cursor"),
    "timeline": FILTERS,
    "performance": (*FILTERS, "buckets"),
    "record": ("request_id",),
}


@dataclass(frozen=True)
class Filters:
    values: dict[str, str]  # the non-empty filter fields, as given
    record_filter: RecordFilter


def page_query(items: Sequence[tuple[str, str]], allowed: Collection[str]) -> dict[str, str]:
    """A page's query as a mapping; a parameter given twice, or one the page does not take
    (a typo would otherwise show everything unfiltered), is a 422 naming it."""
    params = single_params(items)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "no parameters"
        raise InvalidInput(
            [
                Fault("unknown_parameter", k, f"not a parameter of this page ({takes})")
                for k in unknown
            ]
        )
    return params


def parse_filters(model: LoadedModel, query: Mapping[str, str], limit: int) -> Filters:
    values = {k: query[k].strip() for k in FILTERS if query.get(k, "").strip()}
    if "version" in values:
        try:
            check_safe_name(values["version"], "version")
        except ValueError as exc:
            raise InvalidInput([Fault("invalid_value", "version", str(exc))]) from None
    since = parse_time_us("since", values["since"]) if "since" in values else None
    until = parse_time_us("until", values["until"]) if "until" in values else None
    if since is not None and until is not None and since >= until:
        raise InvalidInput([Fault("invalid_value", "until", "must be later than since")])
    expert = values.get("expert")
    if expert is not None and expert not in model.experts:
        known = ", ".join(model.experts)
        raise InvalidInput(
            [Fault("unknown_expert", "expert", f"unknown expert {expert!r}; known: {known}")]
        )
    cursor = decode_cursor(query["cursor"]) if query.get("cursor") else None
    flt = RecordFilter(
        model=model.name,
        since_us=since,
        until_us=until,
        expert=expert,
        version=values.get("version"),
        limit=limit,
        cursor=cursor,
    )
    return Filters(values, flt)


def _mean_weights(record: dict[str, Any]) -> dict[str, float]:
    rows = [p["weights"] for p in record["predictions"]]
    return {name: sum(r[name] for r in rows) / len(rows) for name in rows[0]} if rows else {}


def _prediction_text(record: dict[str, Any]) -> str:
    first = record["predictions"][0]["prediction"] if record["predictions"] else None
    if first is None:
        return ""
    text = str(first["label"]) if "label" in first else f"{first['mean']:.4g}"
    more = record["n_instances"] - 1
    return f"{text} (+{more} more)" if more > 0 else text


def _versions_seen(service: Service, model: LoadedModel) -> list[str]:
    return [v.name for v in stored_versions(service.settings.store, model.name, model.version)]


async def decisions(service: Service, model: LoadedModel, query: Mapping[str, str]) -> dict:
    filters = parse_filters(model, query, PAGE_SIZE)
    store = service.require_store()
    page, next_cursor = await service.read_store(store.page, filters.record_filter)
    total = await service.read_store(queries.count, store, filters.record_filter)
    rows = []
    for record in page:
        weights = _mean_weights(record)
        rows.append(
            {
                "record": record,
                "bar": charts.weight_bar(weights, model.experts),
                "prediction": _prediction_text(record),
                "uncertainty": sum(p["uncertainty"]["total"] for p in record["predictions"])
                / max(1, len(record["predictions"])),
            }
        )
    return {
        "filters": filters.values,
        "rows": rows,
        "total": total,
        "next_cursor": next_cursor,
        "versions": _versions_seen(service, model),
    }


async def record(service: Service, request_id: str) -> dict[str, Any]:
    if not REQUEST_ID.match(request_id):
        what = "missing" if not request_id else "must be 1-128 letters, digits or ._:/+=-"
        raise InvalidInput([Fault("invalid_value", "request_id", what)])
    store = service.require_store()
    found: dict[str, Any] | None = await service.read_store(store.find, request_id)
    if found is None:
        raise NotFound(f"no audit record with request id {request_id!r}", field="request_id")
    return found


async def timeline(service: Service, model: LoadedModel, query: Mapping[str, str]) -> dict:
    filters = parse_filters(model, query, 1)
    store = service.require_store()
    data = await service.read_store(queries.timeline, store, filters.record_filter)
    changes = (
        await service.read_store(queries.version_changes, store, filters.record_filter)
        if len(data["versions"]) > 1
        else []
    )
    experts = data["experts"]
    buckets = data["buckets"]
    x = [float(i) for i in range(len(buckets))]
    # Seconds matter within an hour, the day across days.
    short = len(buckets) < 2 or buckets[-1]["end"][:13] == buckets[0]["start"][:13]
    labels = [b["start"][11:19] if short else b["start"][5:16].replace("T", " ") for b in buckets]

    def series(key: str) -> dict[str, list[float | None]]:
        return {
            e: [b["experts"][e][key] if b["experts"].get(e) else None for b in buckets]
            for e in experts
        }

    return {
        "filters": filters.values,
        "data": data,
        "changes": changes,
        "mean_chart": charts.line_chart(x, series("mean_weight"), labels),
        "share_chart": charts.line_chart(x, series("argmax_share"), labels),
        "versions": _versions_seen(service, model),
    }


async def performance(service: Service, model: LoadedModel, query: Mapping[str, str]) -> dict:
    """Realised scores of the rows with outcomes (``GET /performance``), drawn: loss over
    time, trust calibration; and the drift of the gate's weights now."""
    filters = parse_filters(model, query, 1)
    flt = filters.record_filter
    slots = realised.parse_buckets(query.get("buckets") or None)
    if query.get("buckets"):
        filters.values["buckets"] = query["buckets"]
    store = service.require_store()
    report = await service.read_store(
        realised.report, store.engine, model.name, model.task, flt.since_us, flt.until_us,
        flt.version, None, slots,
    )  # fmt: skip
    experts = list(report["experts"])
    buckets = report["buckets"]
    loss = {"mixture": [b["mixture"]["nll"] for b in buckets]}
    loss |= {e: [b["experts"][e]["nll"] for b in buckets] for e in experts}
    short = len(buckets) < 2 or buckets[-1]["end"][:10] == buckets[0]["start"][:10]
    labels = [b["start"][11:16] if short else b["start"][5:16].replace("T", " ") for b in buckets]
    x = [float(i) for i in range(len(buckets))]
    trust = {
        e: [b["nll"] - b["others_nll"] if b["rows"] else None for b in bins]
        for e, bins in report["calibration"].items()
    }
    centres = [(b["low"] + b["high"]) / 2 for b in next(iter(report["calibration"].values()), [])]
    service.metrics.flush()  # this worker's window, shared before it is read
    drift = await asyncio.to_thread(service.metrics.drift.drift)
    now = drift.get((model.name, model.version), {})
    return {
        "filters": filters.values,
        "report": report,
        "experts": experts,
        "loss_chart": charts.line_chart(
            x, loss, labels, charts.y_range([v for s in loss.values() for v in s])
        ),
        "trust_chart": charts.line_chart(
            centres,
            trust,
            [f"{c:.2f}" for c in centres],
            charts.y_range([v for s in trust.values() for v in s], None),
        ),
        "drift": now,
        "drift_chart": charts.bar_chart(
            {e: d.psi for e, d in now.items()}, [(0.1, "0.1 moderate"), (0.25, "0.25 major")]
        ),
        "drift_min_rows": service.settings.drift_min_rows,
        "versions": _versions_seen(service, model),
        "staged": await staged_section(service, model, (flt.since_us, flt.until_us)),
        **await console_drift(service, model),
    }


def bundle(service: Service, model: LoadedModel) -> dict[str, Any]:
    """The manifest summary and one table of test metrics: the mixture (``iabma``) and any
    other combination the trainer scored (e.g. ``uniform``), then each expert."""
    m = model.manifest
    rows = [(n, "mixture" if n == "iabma" else "combination", s) for n, s in m.metrics.items()]
    rows += [(e.name, "expert", e.metrics) for e in m.experts]
    names = sorted({k for _n, _k, s in rows for k in s})
    return {
        "manifest": m,
        "metric_rows": rows,
        "metric_names": names,
        "versions": stored_versions(service.settings.store, model.name, model.version),
    }
