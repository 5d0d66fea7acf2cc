"""Construction and call building shared by :class:`Client` and :class:`AsyncClient`."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx

from app.client import batches, columnar, results
from app.client.calls import Requests, outcome_items, rows_list
from app.client.core import USER_AGENT, Call, RetryPolicy

DEFAULT_TIMEOUT = 10.0
T = TypeVar("T")


class ClientBase:
    """Holds the settings; subclasses own the httpx client and drive :func:`core.plan`.

    ``api_key`` is sent as ``Authorization: Bearer <key>``; ``auditor_key``, when given,
    replaces it on ``/weights`` and ``/performance``, and ``feedback_key`` on
    ``/feedback``. ``retry`` sets the retry policy (``core.NO_RETRY`` turns
    retries off). With ``gzip=True`` request bodies of ``gzip_min_bytes`` or more are sent
    with ``Content-Encoding: gzip``. ``transport`` and ``http_options`` go to httpx as they
    are (e.g. ``verify=`` or ``limits=``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        auditor_key: str | None = None,
        feedback_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        gzip: bool = False,
        gzip_min_bytes: int = 1024,
        headers: Mapping[str, str] | None = None,
        transport: Any = None,
        seed: int | None = None,
        **http_options: Any,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if gzip_min_bytes < 0:
            raise ValueError(f"gzip_min_bytes must be >= 0, got {gzip_min_bytes}")
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._calls = Requests(api_key, auditor_key, gzip, gzip_min_bytes, feedback_key)
        self._rng = random.Random(seed)
        self._http_kwargs: dict[str, Any] = {
            "base_url": self.base_url,
            "timeout": timeout,
            "headers": {"User-Agent": USER_AGENT, **(headers or {})},
            "transport": transport,
            **http_options,
        }

    def _predict_calls(
        self,
        rows: Iterable[Mapping[str, Any]],
        include: Iterable[str] | None,
        rid: str | None,
        batch_rows: int,
    ) -> list[tuple[int, Call[results.PredictResult]]]:
        return self._batches(
            rows_list(rows), results.predict_result, False, include, rid, batch_rows
        )

    def _frame_calls(
        self, frame: Any, include: Iterable[str] | None, rid: str | None, batch_rows: int
    ) -> tuple[list[tuple[int, Call[columnar.ColumnarResult]]], Any]:
        rows, index = columnar.frame_rows(frame)
        parse = columnar.columnar_result
        return self._batches(rows, parse, True, include, rid, batch_rows), index

    def _batches(
        self,
        rows: list[Any],
        parse: Callable[[Any], T],
        as_columns: bool,
        include: Iterable[str] | None,
        rid: str | None,
        batch_rows: int,
    ) -> list[tuple[int, Call[T]]]:
        """``[(first row, call), ...]``: one call per batch of ``batch_rows`` rows."""
        parts = batches.split(rows, batch_rows)
        calls, offset = [], 0
        for part, part_id in zip(parts, batches.batch_ids(rid, len(parts)), strict=True):
            call = self._calls.predict(
                part, parse, columnar=as_columns, include=include, request_id=part_id
            )
            calls.append((offset, call))
            offset += len(part)
        return calls

    def _feedback_calls(
        self, outcomes: Iterable[Any], batch_rows: int
    ) -> list[tuple[int, Call[results.FeedbackResult]]]:
        """``[(first outcome, call), ...]``: one call per batch of ``batch_rows`` outcomes."""
        parts = batches.split(outcome_items(outcomes), batch_rows)
        offsets = [sum(len(p) for p in parts[:k]) for k in range(len(parts))]
        return [(at, self._calls.feedback(part)) for at, part in zip(offsets, parts, strict=True)]

    def _weights_call(
        self,
        request_id: str | None,
        features: Mapping[str, Any] | None,
        listing: dict[str, Any],
    ) -> Call[Any]:
        """GET /weights in the mode its arguments pick; mixing modes is refused here,
        naming the arguments, rather than left to the server's reading of the query."""
        given = sorted(k for k, v in listing.items() if v is not None)
        if request_id is not None:
            if features is not None or given:
                raise ValueError(
                    f"request_id cannot be combined with {', '.join(given) or 'features'}"
                )
            return self._calls.record(request_id)
        if features is not None:
            if given:
                raise ValueError(f"features cannot be combined with {', '.join(given)}")
            return self._calls.gate(features)
        return self._calls.page(**listing)


def listing(
    since: datetime | str | None,
    until: datetime | str | None,
    expert: str | None,
    limit: int | None,
    cursor: str | None = None,
) -> dict[str, Any]:
    return {"since": since, "until": until, "expert": expert, "limit": limit, "cursor": cursor}
