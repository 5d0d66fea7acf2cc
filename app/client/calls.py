"""Every call of the HTTP contract, built once for both clients: path, query, body, keys.

Bodies are compact JSON (NaN is sent as the token ``NaN``, so that the service names the
field holding it), gzip-compressed from a size threshold when asked. ``/predict`` gets a
client-made ``X-Request-ID`` unless the caller gives one, so that every retry of it carries
the same id.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

from app.client import results
from app.client.core import Call
from app.contract.request import PARTS

T = TypeVar("T")


def new_request_id() -> str:
    """Time-ordered like the server's own ids, which keeps the audit index append-only."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def _text(value: Any, name: str) -> str:
    """A query value; None is the empty value, which /weights reads as missing."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(float(value))  # numpy 2's repr of its float64 is "np.float64(0.3)"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (str, int)):
        return str(value)
    item = getattr(value, "item", None)  # a numpy scalar
    if item is not None:
        return _text(item(), name)
    raise TypeError(f"{name}: cannot send a {type(value).__name__} as a query value: {value!r}")


def poster_list(posters: Iterable[str] | None) -> str:
    """``exclude_poster``'s value: the posters (as ``Performance.posters`` names them)
    joined by commas, as the server reads them; empty for none."""
    if posters is None:
        return ""
    names = [posters] if isinstance(posters, str) else list(posters)
    bad = [p for p in names if not isinstance(p, str) or not p or "," in p]
    if bad:
        raise ValueError(
            f"exclude_poster: expected posters as Performance.posters names them "
            f"(key: and 12 hex digits, or anonymous), got {bad[0]!r}"
        )
    return ",".join(names)


def rows_list(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(rows, (str, bytes, Mapping)) or hasattr(rows, "columns"):
        raise TypeError(
            f"rows: expected a list of mappings (one per row), got {type(rows).__name__}; "
            "send a DataFrame, Table or mapping of columns with predict_frame"
        )
    return list(rows)


def outcome_items(outcomes: Iterable[Any]) -> list[dict[str, Any]]:
    """Outcomes as the body's items: mappings with ``request_id``, ``row`` (0 when left
    out) and ``outcome``, or ``(request_id, row, outcome)`` tuples."""
    if isinstance(outcomes, (str, bytes, Mapping)):
        raise TypeError(
            f"outcomes: expected a list of outcomes, got {type(outcomes).__name__}; each is "
            "a mapping with request_id, row and outcome, or a (request_id, row, outcome) tuple"
        )
    items = []
    for k, item in enumerate(outcomes):
        if isinstance(item, Mapping):
            items.append(dict(item))
        elif isinstance(item, tuple) and len(item) == 3:
            items.append({"request_id": item[0], "row": item[1], "outcome": item[2]})
        else:
            raise TypeError(
                f"outcomes[{k}]: expected a mapping or a (request_id, row, outcome) tuple, "
                f"got {item!r}"
            )
    return items


def _json_default(value: Any) -> Any:
    item = getattr(value, "item", None)
    if item is not None:
        return item()
    if isinstance(value, Decimal):
        # What a database's NUMERIC column reads as (pandas.read_sql, pyarrow decimal128);
        # the model computes in float32, so a float loses nothing it would use.
        return float(value)
    raise TypeError(f"cannot send a {type(value).__name__} as JSON: {value!r}")


@dataclass(frozen=True)
class Requests:
    """Builds every call of the HTTP contract; holds the keys and body-encoding choices."""

    api_key: str | None = None
    auditor_key: str | None = None
    gzip: bool = False
    gzip_min_bytes: int = 1024
    feedback_key: str | None = None

    def _auth(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _json(self, payload: Any) -> tuple[bytes, dict[str, str]]:
        # NaN is sent as the token NaN so that the service names the field that holds it.
        raw = json.dumps(payload, separators=(",", ":"), default=_json_default).encode()
        headers = {"Content-Type": "application/json"}
        if self.gzip and len(raw) >= self.gzip_min_bytes:
            raw = gzip.compress(raw, compresslevel=5, mtime=0)
            headers["Content-Encoding"] = "gzip"
        return raw, headers

    def predict(
        self,
        rows: Iterable[Mapping[str, Any]],
        parse: Callable[[Any], T],
        *,
        columnar: bool,
        include: Iterable[str] | None,
        request_id: str | None,
    ) -> Call[T]:
        payload: dict[str, Any] = {"instances": rows_list(rows)}
        if columnar:
            payload["format"] = "columnar"
        if include is not None:
            parts = [include] if isinstance(include, str) else list(include)
            unknown = [p for p in parts if p not in PARTS]
            if unknown or not parts:
                raise ValueError(f"include: expected parts among {', '.join(PARTS)}, got {parts}")
            payload["include"] = parts
        rid = request_id or new_request_id()
        body, headers = self._json(payload)
        headers.update(self._auth(self.api_key))
        headers["X-Request-ID"] = rid
        return Call("POST", "/predict", parse, body=body, headers=headers, request_id=rid)

    def feedback(self, items: list[dict[str, Any]]) -> Call[results.FeedbackResult]:
        """Retried like any idempotent call: a repeat of stored outcomes is a duplicate."""
        body, headers = self._json({"outcomes": items})
        headers.update(self._auth(self.feedback_key or self.api_key))
        return Call("POST", "/feedback", results.feedback_result, body=body, headers=headers)

    def performance(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        version: str | None = None,
        exclude_poster: Iterable[str] | None = None,
        buckets: int | None = None,
    ) -> Call[results.Performance]:
        given = {"since": since, "until": until, "version": version, "buckets": buckets}
        params = [(k, _text(v, k)) for k, v in given.items() if v is not None]
        posters = poster_list(exclude_poster)
        if posters:
            params.append(("exclude_poster", posters))
        key = self.auditor_key or self.api_key
        return Call("GET", "/performance", results.performance, params=tuple(params),
                    headers=self._auth(key))  # fmt: skip

    def models(self) -> Call[results.ModelInfo]:
        return Call("GET", "/models", results.model_info, headers=self._auth(self.api_key))

    def _weights(self, params: list[tuple[str, str]], parse: Callable[[Any], T]) -> Call[T]:
        key = self.auditor_key or self.api_key
        return Call("GET", "/weights", parse, params=tuple(params), headers=self._auth(key))

    def record(self, request_id: str) -> Call[results.AuditRecord]:
        return self._weights(
            [("request_id", _text(request_id, "request_id"))], results.audit_record
        )

    def gate(self, features: Mapping[str, Any]) -> Call[results.GateWeights]:
        if not features:
            raise ValueError("features: give every feature of the model, got none")
        params = [(str(k), _text(v, f"features[{k!r}]")) for k, v in features.items()]
        return self._weights(params, results.gate_weights)

    def page(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Call[results.RecordPage]:
        given = {"since": since, "until": until, "expert": expert, "limit": limit, "cursor": cursor}
        params = [(k, _text(v, k)) for k, v in given.items() if v is not None]
        return self._weights(params, results.record_page)

    @staticmethod
    def next_page(call: Call[results.RecordPage], page: results.RecordPage) -> Call[Any] | None:
        if not page.next_cursor:
            return None
        params = [(k, v) for k, v in call.params if k != "cursor"]
        return replace(call, params=(*params, ("cursor", page.next_cursor)))
