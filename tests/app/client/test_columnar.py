"""predict_frame against a real uvicorn: frames in, the same numbers as rows, in columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from app_support import Bundles, instances

from app.client import Client, ColumnarResult, PredictResult
from app.client.columnar import frame_rows


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
