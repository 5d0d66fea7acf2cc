"""predict_frame against a real uvicorn: frames in, the same numbers as rows, in columns."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from app.client import (
    AsyncClient,
    Client,
    ColumnarResult,
    InvalidInput,
    PayloadTooLarge,
    PredictResult,
)
from app.client.columnar import frame_rows
from tests.support.bundles import Bundles, instances

if TYPE_CHECKING:
    from conftest import Serve  # the fixture's type; pytest provides the value


def flat(result: PredictResult, experts: list[str], classes: list[str] | None) -> dict:
    """The rows answer in the columnar answer's flat layout, to compare the two."""
    out: dict[str, list] = {}

    def put(name: str, value: object) -> None:
        out.setdefault(name, []).append(value)

    for item in result.predictions:
        p = item.prediction
        if classes is not None:
            put("label", p.label)
            for c in classes:
                put(f"probability.{c}", p.probabilities[c])
        else:
            for k in ("mean", "std"):
                put(k, getattr(p, k))
            put("lower", p.interval.lower)
            put("upper", p.interval.upper)
        for e in experts:
            put(f"weight.{e}", item.weights[e])
        for e in experts:
            own = item.experts[e]
            if classes is not None:
                put(f"expert.{e}.label", own.label)
                for c in classes:
                    put(f"expert.{e}.probability.{c}", own.probabilities[c])
            else:
                put(f"expert.{e}.mean", own.mean)
                put(f"expert.{e}.std", own.std)
        for k in ("total", "aleatoric", "epistemic", "selection"):
            put(f"uncertainty.{k}", getattr(item.uncertainty, k))
    return out


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, values in want.items():
        if isinstance(values[0], float):
            np.testing.assert_allclose(got[name], values, atol=1e-9, rtol=1e-9, err_msg=name)
        else:
            assert got[name] == values, name


def test_pandas_classification_frame_equals_rows(demo_url: str, bundles: Bundles) -> None:
    frame = bundles.demo.X.iloc[10:40].set_axis(range(100, 130))
    with Client(demo_url) as client:
        cols = client.predict_frame(frame)
        rows = client.predict(bundles.demo.instances(slice(10, 40)))
    assert isinstance(cols, ColumnarResult) and len(cols) == 30
    assert cols.classes == tuple(bundles.demo.est.classes_.tolist())
    classes = [str(c) for c in cols.classes]
    assert_same(cols.columns(), flat(rows, list(cols.experts), classes))
    df = cols.to_pandas()
    assert list(df.index) == list(range(100, 130)), "the answer keeps the frame's index"
    np.testing.assert_allclose(
        df[[f"weight.{e}" for e in bundles.demo.est.expert_names_]].to_numpy(),
        bundles.demo.est.weights(frame),
        atol=1e-5,
        rtol=0,
    )


def test_pandas_regression_frame_with_missing_values(credit_url: str, bundles: Bundles) -> None:
    frame = bundles.credit.X.iloc[:25].copy()
    frame.loc[0:3, "purpose"] = None  # missing categories and numbers travel as null
    frame.loc[2:6, "age"] = np.nan
    frame["purpose"] = frame["purpose"].astype("category")  # a categorical dtype as well
    with Client(credit_url) as client:
        cols = client.predict_frame(frame)
        rows = client.predict(instances(frame))
    assert cols.classes is None and cols.interval_level == 0.9
    assert_same(cols.columns(), flat(rows, list(cols.experts), None))
    dist = bundles.credit.est.distribution(frame.astype({"purpose": object}))
    scale = bundles.credit.est.y_scale_
    np.testing.assert_allclose(np.asarray(cols.mean) / scale, dist.mean / scale, atol=1e-5)


def test_frame_rows_sends_missing_values_as_null() -> None:
    frame = pd.DataFrame(
        {
            "a": [1.5, np.nan, 3.0],
            "b": pd.array([1, None, 3], dtype="Int64"),
            "c": ["x", None, "z"],
            "d": np.array([1, 2, 3], dtype=np.int32),
        }
    )
    rows, index = frame_rows(frame)
    assert rows == [
        {"a": 1.5, "b": 1, "c": "x", "d": 1},
        {"a": None, "b": None, "c": None, "d": 2},
        {"a": 3.0, "b": 3, "c": "z", "d": 3},
    ]
    assert all(type(r["d"]) is int for r in rows)
    assert list(index) == [0, 1, 2]
    assert frame_rows({"a": [1.0, float("nan")], "c": ["x", None]})[0] == [
        {"a": 1.0, "c": "x"}, {"a": None, "c": None},
    ]  # fmt: skip
    with pytest.raises(TypeError, match="column names must be text"):
        frame_rows(pd.DataFrame({0: [1.0]}))
    with pytest.raises(ValueError, match="unique; repeated: \\['a'\\]"):
        frame_rows(pd.DataFrame([[1.0, 2.0]], columns=["a", "a"]))
    with pytest.raises(ValueError, match="differ in length"):
        frame_rows({"a": [1.0], "c": ["x", "y"]})
    with pytest.raises(TypeError, match="pandas DataFrame, a pyarrow Table"):
        frame_rows([{"a": 1.0}])


def test_include_and_a_mapping_of_columns(demo_url: str, bundles: Bundles) -> None:
    X = bundles.demo.X.iloc[:5]
    with Client(demo_url) as client:
        cols = client.predict_frame(
            {"x1": X.x1.tolist(), "x2": X.x2.tolist()}, include=["weights", "uncertainty"]
        )
    assert cols.label is None and cols.probabilities is None and cols.expert_labels is None
    assert len(cols) == 5 and cols.index is None
    assert sorted(cols.columns()) == sorted(
        [f"weight.{e}" for e in cols.experts]
        + [f"uncertainty.{k}" for k in ("total", "aleatoric", "epistemic", "selection")]
    )


def test_pyarrow_table_in_and_out(credit_url: str, bundles: Bundles) -> None:
    pa = pytest.importorskip("pyarrow")
    frame = bundles.credit.X.iloc[:12]
    table = pa.Table.from_pandas(frame, preserve_index=False)
    with Client(credit_url) as client:
        from_arrow = client.predict_frame(table)
        from_pandas = client.predict_frame(frame)
    assert from_arrow.columns() == from_pandas.columns()
    out = from_arrow.to_arrow()
    assert out.num_rows == 12 and "uncertainty.total" in out.column_names


def test_a_frame_over_the_row_limit_goes_in_batches(serve: Serve, bundles: Bundles) -> None:
    url = serve("demo", IABMA_MAX_BATCH_ROWS="8").base_url
    frame = bundles.demo.X.iloc[:30].set_axis(range(500, 530))
    with Client(url) as client:
        with pytest.raises(PayloadTooLarge, match="IABMA_MAX_BATCH_ROWS"):
            client.predict_frame(frame, batch_rows=9)
        cols = client.predict_frame(frame, batch_rows=8, request_id="frame-7")
        one = [client.predict_frame(frame.iloc[i : i + 8]) for i in range(0, 30, 8)]
        audited = [client.weights(request_id=f"frame-7.{k}") for k in range(4)]
    assert len(cols) == 30 and cols.request_ids == (
        "frame-7.0",
        "frame-7.1",
        "frame-7.2",
        "frame-7.3",
    )
    assert cols.request_id == "frame-7.0"
    got = cols.columns()
    want: dict[str, list] = {}
    for part in one:
        for name, values in part.columns().items():
            want.setdefault(name, []).extend(values)
    assert_same(got, want)
    assert list(cols.to_pandas().index) == list(range(500, 530))

    async def batched() -> ColumnarResult:
        async with AsyncClient(url) as aclient:
            return await aclient.predict_frame(frame, batch_rows=8)

    from_async = asyncio.run(batched())
    assert len(from_async.request_ids) == 4
    assert_same(from_async.columns(), want)
    assert [r.n_instances for r in audited] == [8, 8, 8, 6], "each batch is its own record"


def test_a_fault_in_a_later_batch_names_its_row_in_the_frame(
    serve: Serve, bundles: Bundles
) -> None:
    url = serve("demo", IABMA_MAX_BATCH_ROWS="8").base_url
    frame = bundles.demo.X.iloc[:30].astype(object)
    frame.iloc[17, 0] = "abc"  # two faults in the third batch (rows 16-23), one in the fourth
    frame.iloc[19, 1] = "def"
    frame.iloc[27, 1] = "ghi"
    with Client(url) as client:
        with pytest.raises(InvalidInput) as bad:
            client.predict_frame(frame, batch_rows=8)
        with pytest.raises(ValueError, match="batch_rows must be a whole number >= 1, got 0"):
            client.predict_frame(frame, batch_rows=0)
        with pytest.raises(ValueError, match="once batch numbers are added"):
            client.predict_frame(frame, batch_rows=8, request_id="x" * 127)
        assert len(client.predict_frame(frame.iloc[:3], request_id="x" * 128)) == 3
    x1, x2 = frame.columns[:2]
    assert bad.value.field == f"instances[17].{x1}"
    assert [d.field for d in bad.value.details] == [f"instances[17].{x1}", f"instances[19].{x2}"]


def test_rows_over_the_row_limit_go_in_batches_too(serve: Serve, bundles: Bundles) -> None:
    url = serve("demo", IABMA_MAX_BATCH_ROWS="8").base_url
    rows = bundles.demo.instances(slice(0, 20))
    with Client(url) as client:
        whole = client.predict(rows, batch_rows=8, request_id="rows-3")
        parts = [client.predict(rows[i : i + 8]) for i in range(0, 20, 8)]
        rows[13] = {**rows[13], "x2": "abc"}
        with pytest.raises(InvalidInput) as bad:
            client.predict(rows, batch_rows=8)
    assert whole.request_ids == ("rows-3.0", "rows-3.1", "rows-3.2")
    assert whole.predictions == tuple(item for p in parts for item in p.predictions)
    assert bad.value.field == "instances[13].x2"
