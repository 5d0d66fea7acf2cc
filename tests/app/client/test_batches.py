"""Splitting a frame into batches and joining the answers, on answers built by hand."""

from __future__ import annotations

import dataclasses

import pytest

from app.client import batches
from app.client.columnar import ColumnarResult
from app.client.errors import FieldError, InvalidInput, InvalidResponse


def answer(version: str, rid: str, labels: list[str]) -> ColumnarResult:
    n = len(labels)
    return ColumnarResult(
        model="demo", version=version, request_id=rid, task="classification", n=n,
        experts=("a", "b"), classes=("no", "yes"), label=labels,
        weights=[[0.5, 0.5]] * n, uncertainty={"total": [0.1] * n},
        request_ids=(rid,),
    )  # fmt: skip


def test_split_and_ids() -> None:
    assert batches.split(list(range(5)), 2) == [[0, 1], [2, 3], [4]]
    assert batches.split([], 3) == [[]], "an empty frame is one request the server refuses"
    assert batches.batch_ids("r", 1) == ["r"]
    assert batches.batch_ids("r", 3) == ["r.0", "r.1", "r.2"]
    assert batches.batch_ids(None, 2) == [None, None]
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="batch_rows must be a whole number"):
            batches.split([1], bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a valid X-Request-ID once batch numbers"):
        batches.batch_ids("has space", 2)
    assert batches.batch_ids("has space", 1) == ["has space"], "one request: the service says"


def test_join_keeps_row_order_and_refuses_two_versions() -> None:
    joined = batches.join([answer("v1", "r.0", ["no", "yes"]), answer("v1", "r.1", ["yes"])], None)
    assert (joined.n, joined.label, joined.request_ids) == (3, ["no", "yes", "yes"], ("r.0", "r.1"))
    assert joined.uncertainty == {"total": [0.1] * 3} and joined.weights == [[0.5, 0.5]] * 3
    assert joined.probabilities is None, "a part left out stays out"
    with pytest.raises(InvalidResponse, match="changed from version v1 to v2 between batches"):
        batches.join([answer("v1", "r.0", ["no"]), answer("v2", "r.1", ["yes"])], None)
    other = dataclasses.replace(answer("v1", "r.1", ["yes"]), experts=("a", "c"))
    with pytest.raises(InvalidResponse):
        batches.join([answer("v1", "r.0", ["no"]), other], None)


def test_shift_counts_rows_from_the_frame() -> None:
    err = InvalidInput(
        "bad", status=422, field="instances[3].x1",
        details=(FieldError("c", "m", "instances[3].x1"), FieldError("c", "m", "include")),
    )  # fmt: skip
    batches.shift(err, 2000)
    assert err.field == "instances[2003].x1"
    assert [d.field for d in err.details] == ["instances[2003].x1", "include"]
