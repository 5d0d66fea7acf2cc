"""The asyncio client: :class:`AsyncClient`, the same calls as :class:`Client`, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar, overload

import httpx

from app.client import batches, columnar, results
from app.client.base import ClientBase, listing
from app.client.core import Call, Outcome, Sleep, plan
from app.client.errors import ClientError

T = TypeVar("T")


class AsyncClient(ClientBase):
    """``async with AsyncClient(url) as client: await client.predict(rows)``."""

    def __init__(self, base_url: str, **options: Any) -> None:
        super().__init__(base_url, **options)
        self._http = httpx.AsyncClient(**self._http_kwargs)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call[T]) -> T:
        steps = plan(call, self.retry, self._rng)
        outcome: Outcome = None
        try:
            while True:
                step = steps.send(outcome)
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    outcome = None
                    continue
                try:
                    outcome = await self._http.request(**step.http_args())
                except httpx.TransportError as exc:
                    outcome = exc
        except StopIteration as done:
            return done.value

    async def predict(
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
        return batches.join_rows(await self._run_batches(calls))

    async def predict_frame(
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
        return batches.join(await self._run_batches(calls), index)

    async def _run_batches(self, calls: list[tuple[int, Call[T]]]) -> list[T]:
        parts = []
        for offset, call in calls:
            try:
                parts.append(await self._run(call))
            except ClientError as err:
                batches.shift(err, offset)
                raise
        return parts

    async def models(self) -> results.ModelInfo:
        return await self._run(self._calls.models())

    async def feedback(
        self, outcomes: Iterable[Any], *, batch_rows: int = batches.DEFAULT_BATCH_ROWS
    ) -> results.FeedbackResult:
        """As :meth:`app.client.Client.feedback`."""
        calls = self._feedback_calls(outcomes, batch_rows)
        return batches.join_feedback(await self._run_batches(calls))

    async def performance(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        version: str | None = None,
        exclude_poster: Iterable[str] | None = None,
        buckets: int | None = None,
    ) -> results.Performance:
        return await self._run(
            self._calls.performance(
                since=since,
                until=until,
                version=version,
                exclude_poster=exclude_poster,
                buckets=buckets,
            )
        )

    @overload
    async def weights(self, *, request_id: str) -> results.AuditRecord: ...
    @overload
    async def weights(self, *, features: Mapping[str, Any]) -> results.GateWeights: ...
    @overload
    async def weights(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> results.RecordPage: ...

    async def weights(
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
        page = listing(since, until, expert, limit, cursor)
        return await self._run(self._weights_call(request_id, features, page))

    async def iter_pages(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[results.RecordPage]:
        call: Call[Any] | None = self._calls.page(**listing(since, until, expert, limit))
        while call is not None:
            page = await self._run(call)
            yield page
            call = self._calls.next_page(call, page)

    async def iter_records(self, **filters: Any) -> AsyncIterator[results.AuditRecord]:
        async for page in self.iter_pages(**filters):
            for record in page.records:
                yield record
