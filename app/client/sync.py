"""The blocking client: :class:`Client`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar, overload

import httpx

from app.client import batches, columnar, results
from app.client.base import ClientBase, listing
from app.client.core import Call, Outcome, Sleep, plan
from app.client.errors import ClientError

T = TypeVar("T")


class Client(ClientBase):
    """Calls the IA-BMA service over HTTP; use it as a context manager, or ``close()`` it.

    >>> with Client("http://127.0.0.1:8000", api_key="...") as client:
    ...     result = client.predict([{"x1": 0.5, "x2": -1.0}])
    """

    def __init__(self, base_url: str, **options: Any) -> None:
        super().__init__(base_url, **options)
        self._http = httpx.Client(**self._http_kwargs)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: Call[T]) -> T:
        steps = plan(call, self.retry, self._rng)
        outcome: Outcome = None
        try:
            while True:
                step = steps.send(outcome)
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    outcome = None
                    continue
                try:
                    outcome = self._http.request(**step.http_args())
                except httpx.TransportError as exc:
                    outcome = exc
        except StopIteration as done:
            return done.value

    def predict(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        include: Iterable[str] | None = None,
        request_id: str | None = None,
        batch_rows: int = batches.DEFAULT_BATCH_ROWS,
    ) -> results.PredictResult:
        """One prediction per row (a mapping of feature name to value; None is missing).

        More rows than ``batch_rows`` go in several requests, one after another
        (:mod:`app.client.batches`); an error names its row among all the rows."""
        calls = self._predict_calls(rows, include, request_id, batch_rows)
        return batches.join_rows(self._run_batches(calls))

    def predict_frame(
        self,
        frame: Any,
        *,
        include: Iterable[str] | None = None,
        request_id: str | None = None,
        batch_rows: int = batches.DEFAULT_BATCH_ROWS,
    ) -> columnar.ColumnarResult:
        """A pandas DataFrame, pyarrow Table or mapping of columns in; one list per field
        out (``.to_pandas()`` puts them in a DataFrame on the frame's index).

        Frames longer than ``batch_rows`` go in several requests, one after another
        (:mod:`app.client.batches`); an error names its row in the whole frame."""
        calls, index = self._frame_calls(frame, include, request_id, batch_rows)
        return batches.join(self._run_batches(calls), index)

    def _run_batches(self, calls: list[tuple[int, Call[T]]]) -> list[T]:
        parts = []
        for offset, call in calls:
            try:
                parts.append(self._run(call))
            except ClientError as err:
                batches.shift(err, offset)
                raise
        return parts

    def models(self) -> results.ModelInfo:
        return self._run(self._calls.models())

    def feedback(
        self, outcomes: Iterable[Any], *, batch_rows: int = batches.DEFAULT_BATCH_ROWS
    ) -> results.FeedbackResult:
        """Outcomes for rows of past predictions: mappings with ``request_id``, ``row``
        (0 when left out) and ``outcome`` (a class as ``predict`` returned the label, or
        the observed number), or ``(request_id, row, outcome)`` tuples.

        More than ``batch_rows`` go in several requests, one after another, each stored
        whole or not at all; the counts are added up. A fault names its outcome among all
        of them (``outcomes[2517].outcome``); the batches before it were stored, and
        sending them again only counts them as duplicates."""
        return batches.join_feedback(self._run_batches(self._feedback_calls(outcomes, batch_rows)))

    def performance(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        version: str | None = None,
        exclude_poster: Iterable[str] | None = None,
        buckets: int | None = None,
    ) -> results.Performance:
        """Realised scores over the rows with outcomes served between ``since`` and
        ``until`` (by ``version``): the mixture's, each expert's, the best expert in
        hindsight and the regret, trust calibration and ``buckets`` time buckets; less
        the outcomes of the posters in ``exclude_poster`` (as ``Performance.posters``
        names them: ``key:`` and 12 hex digits, or ``anonymous``)."""
        return self._run(
            self._calls.performance(
                since=since,
                until=until,
                version=version,
                exclude_poster=exclude_poster,
                buckets=buckets,
            )
        )

    @overload
    def weights(self, *, request_id: str) -> results.AuditRecord: ...
    @overload
    def weights(self, *, features: Mapping[str, Any]) -> results.GateWeights: ...
    @overload
    def weights(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> results.RecordPage: ...

    def weights(
        self,
        *,
        request_id: str | None = None,
        features: Mapping[str, Any] | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Any:
        """``request_id=``: that audited record; ``features=``: the gate's weights now;
        otherwise one page of records (newest first) with per-expert aggregates."""
        page = listing(since, until, expert, limit, cursor)
        return self._run(self._weights_call(request_id, features, page))

    def iter_pages(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
    ) -> Iterator[results.RecordPage]:
        """Every page of the listing, following ``next_cursor`` until the last."""
        call: Call[Any] | None = self._calls.page(**listing(since, until, expert, limit))
        while call is not None:
            page = self._run(call)
            yield page
            call = self._calls.next_page(call, page)

    def iter_records(self, **filters: Any) -> Iterator[results.AuditRecord]:
        """Every record of the listing (same filters as :meth:`iter_pages`), page by page."""
        for page in self.iter_pages(**filters):
            yield from page.records
