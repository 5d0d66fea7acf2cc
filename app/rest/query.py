"""The query parameters of ``GET /weights`` (a listing's filters, or every feature for a
gate probe) and of ``GET /performance``, typed by the served bundle. The rules between
parameters, which a schema cannot state, are in their descriptions."""

from __future__ import annotations

from app.contract.schema import Schema
from app.core.context import REQUEST_ID
from app.core.nullable import valid_row
from app.core.runtime import LoadedModel
from app.core.weights import DEFAULT_LIMIT, MAX_LIMIT
from app.rest.schemas import feature_value


def weights_parameters(model: LoadedModel) -> list[Schema]:
    """The listing's filters and every feature (for a gate probe), all optional.

    A feature may be named like a filter ("limit"): the two share one parameter whose
    schema takes either, as the route does (a query naming every feature is a probe).
    The two modes exclude each other, and ``until`` must be later than ``since``: rules
    between parameters, which a schema cannot state, so the descriptions do.
    """
    listing: dict[str, Schema] = {
        "request_id": {"type": "string", "pattern": REQUEST_ID.pattern},
        "since": {"type": "string", "format": "date-time"},
        "until": {"type": "string", "format": "date-time"},
        "expert": {"enum": list(model.experts)},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        "cursor": {"type": "string"},
    }
    params: dict[str, Schema] = {}
    for name, schema in listing.items():
        params[name] = {"name": name, "in": "query", "required": False, "schema": schema,
                        "description": _LISTING_TEXT.get(name, LISTING_ONLY)}  # fmt: skip
    example = valid_row(model)
    for name in model.features.names:
        value = feature_value(model, name, in_query=True)
        if name in params:
            shared = params[name]["schema"]
            params[name]["schema"] = {"anyOf": [shared, value]}
            params[name]["description"] = (
                f"{name}: a feature, and a listing filter. With every other feature it is "
                "the feature (a probe); otherwise the filter."
            )
        else:
            params[name] = {"name": name, "in": "query", "required": False, "schema": value,
                            "example": example[name], "description": PROBE_ONLY}  # fmt: skip
    return list(params.values())


LISTING_ONLY = "A listing filter: not with feature values, which make the query a probe."
PROBE_ONLY = "A gate probe takes every feature and no listing filter."
_LISTING_TEXT = {
    "request_id": "Alone: the audited record of that request.",
    "since": f"Inclusive. {LISTING_ONLY}",
    "until": f"Exclusive, and later than since. {LISTING_ONLY}",
}


def performance_parameters() -> list[Schema]:
    """The rows' filter: the time they were served and the version that served them."""
    times = {"type": "string", "format": "date-time"}
    version = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}
    text = {"since": "Inclusive.", "until": "Exclusive, and later than since.", "version": ""}
    return [
        {"name": name, "in": "query", "required": False, "schema": schema}
        | ({"description": text[name]} if text[name] else {})
        for name, schema in (("since", times), ("until", times), ("version", version))
    ]
