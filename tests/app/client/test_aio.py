"""AsyncClient against a real uvicorn: the same answers as the blocking client."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from app.client import AsyncClient, Client, InvalidInput, NotFound
from tests.support.bundles import Bundles

if TYPE_CHECKING:
    from conftest import Serve  # the fixture's type; pytest provides the value


def test_async_predict_equals_sync(demo_url: str, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(0, 10))

    async def main() -> list:
        async with AsyncClient(demo_url) as client:
            return await asyncio.gather(*(client.predict(rows[i : i + 2]) for i in range(0, 10, 2)))

    answers = asyncio.run(main())
    with Client(demo_url) as client:
        want = client.predict(rows)
    assert [p for a in answers for p in a.predictions] == list(want.predictions)
    assert len({a.request_id for a in answers}) == 5


def test_async_frame_models_pages_and_errors(serve: Serve, bundles: Bundles) -> None:
    url = serve("demo").base_url
    frame = bundles.demo.X.iloc[:6]
    start = datetime.now(UTC)

    async def main() -> tuple:
        async with AsyncClient(url) as client:
            columns = await client.predict_frame(frame, include=["prediction", "weights"])
            info = await client.models()
            pages = [p async for p in client.iter_pages(since=start, limit=1)]
            records = [r async for r in client.iter_records(since=start)]
            with pytest.raises(InvalidInput) as bad:
                await client.predict([{"x1": 1.0}])
            with pytest.raises(NotFound):
                await client.weights(request_id="async-never-sent")
            return columns, info, pages, records, bad.value

    columns, info, pages, records, bad = asyncio.run(main())
    assert len(columns) == 6 and columns.version == info.version == bundles.demo.version
    assert columns.label == bundles.demo.est.predict(frame).tolist()
    assert [len(p.records) for p in pages] == [1]
    assert [r.request_id for r in records] == [columns.request_id]
    assert (bad.status, bad.field, bad.code) == (422, "instances[0].x2", "missing_feature")
