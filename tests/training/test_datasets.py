"""Reading data: the shared CSVs, the simulation, and clear errors for unusable CSVs."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pandas as pd
import pytest

from training.datasets import SHARED, load_csv, load_shared, simulate
from training.errors import CsvError, DataWarning, ParameterError
from training.features import FeatureSchema

SHA256 = {
    "spambase": "f61035a509a20e4c94a63d2db2c86fe660ed443dbc16aadf76e7d8abb37725c0",
    "credit-g": "38b6dbf6fb4b0311a3ffc005730f42623128591fb36473ab3c22d270c0467632",
    "bike": "b03a2d02e8c10f435c43c7f0b358b7e34a003afea53dbc37f0183f2763295133",
    "california": "94ef369b909f5c725340b512b7c9a05c1550a554b6592d29303990e3ba521a1f",
}


def test_a_numeric_column_with_a_fifth_of_inf_is_named(csv) -> None:
    """A few distinct texts among mostly numbers are named, even at a fifth of the cells;
    when the numbers are the fewer, the column is categorical without a word."""
    df = frame(100)
    df["a"] = df["a"].astype(object)
    df.loc[:19, "a"] = "inf"
    with pytest.warns(DataWarning, match="'a' is numeric except for 20 cells holding 'inf'"):
        load_csv(csv(df), "t", "regression")
    df.loc[:59, "a"] = "inf"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        data = load_csv(csv(df), "t", "regression")
    assert "inf" in set(data.X["a"].cat.categories)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_csvs_are_the_verified_files(name, data_dir) -> None:
    digest = hashlib.sha256((data_dir / SHARED[name].file).read_bytes()).hexdigest()
    assert digest == SHA256[name]
    data = load_shared(name, data_dir)
    assert len(data.X) == len(data.y) >= 1000
    if name == "bike":
        assert not {"casual", "registered", "instant", "dteday"} & set(data.X.columns)


def test_simulation_matches_the_paper_generator() -> None:
    d = simulate(1000, random_state=3)
    assert d.X.shape == (1000, 2) and (d.region == 0).sum() == 500
    lin = d.X[d.region == 0].to_numpy()
    circ = d.X[d.region == 1].to_numpy()
    assert np.allclose(lin.mean(axis=0), [-1, 0], atol=0.06)
    assert np.allclose(lin.var(axis=0), 0.1, atol=0.02)
    r = np.linalg.norm(circ - [1, 0], axis=1)
    assert r.max() <= np.sqrt(2) + 1e-12
    assert np.array_equal(d.y[d.region == 1].to_numpy(), (r < 1).astype(int))
    assert np.array_equal(d.y[d.region == 0].to_numpy(), (lin.sum(axis=1) > -1).astype(int))
    assert simulate(50, 3).X.equals(simulate(50, 3).X)


@pytest.fixture()
def csv(tmp_path):
    def write(df: pd.DataFrame) -> str:
        path = tmp_path / "t.csv"
        df.to_csv(path, index=False)
        return str(path)

    return write


def frame(n: int = 80) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.choice(["x", "y"], n),
            "t": rng.normal(size=n),
            "c": rng.integers(0, 2, n),
        }
    )


def test_unusable_csvs_get_errors_that_name_the_file_and_column(csv) -> None:
    good = frame()
    with pytest.raises(CsvError, match=r"t.csv: --target 'price' is not a column; the columns"):
        load_csv(csv(good), "price", "regression")
    with pytest.raises(CsvError, match="column 't': is constant"):
        load_csv(csv(good.assign(t=1.5)), "t", "regression")
    with pytest.raises(CsvError, match="column 'c': has a single class"):
        load_csv(csv(good.assign(c=1)), "c", "classification")
    with pytest.raises(CsvError, match="has 40 usable rows; at least 50"):
        load_csv(csv(frame(40)), "t", "regression")
    with pytest.raises(CsvError, match="column 'b': a regression target must be numeric"):
        load_csv(csv(good), "b", "regression")
    with pytest.raises(CsvError, match="column 't': has non-integer numbers"):
        load_csv(csv(good), "t", "classification")
    with pytest.raises(ParameterError, match="task='ranking'"):
        load_csv(csv(good), "t", "ranking")
    with pytest.raises(CsvError, match=r"--drop names columns the file does not have: \['zz'\]"):
        load_csv(csv(good), "t", "regression", drop=["zz"])
    with pytest.raises(CsvError, match="does not exist"):
        load_csv("/nonexistent.csv", "t", "regression")


def test_rows_without_a_target_are_dropped_with_a_warning(csv) -> None:
    gaps = frame()
    gaps.loc[[3, 9], "t"] = np.nan
    with pytest.warns(DataWarning, match="column 't': dropped 2 of 80 rows whose target"):
        data = load_csv(csv(gaps), "t", "regression")
    assert len(data.y) == 78 and list(data.source_rows[2:4]) == [3, 5]


def test_the_default_missing_values_are_pandas_and_the_user_adds_more(csv) -> None:
    df = frame()
    df["b"] = df["b"].astype(object)
    df.loc[0, "b"] = " ? "
    df.loc[1, "b"] = "NA"
    df.loc[2, "b"] = "unknown"
    data = load_csv(csv(df), "t", "regression")
    # pandas' list has "NA" but neither "?" nor "unknown": those are categories.
    assert data.X["b"].isna().sum() == 1
    assert {"?", "unknown"} <= set(data.X["b"].cat.categories)
    data = load_csv(csv(df), "t", "regression", na_values=["?", "unknown"])
    assert data.X["b"].isna().sum() == 3 and set(data.X["b"].cat.categories) == {"x", "y"}
    df["a"] = df["a"].astype(object)
    df.loc[2, "a"] = "?"
    with pytest.warns(DataWarning, match="'a' is numeric except for 1 cells holding '\\?'"):
        data = load_csv(csv(df), "t", "regression")
    assert FeatureSchema.infer(data.X).features[0].dtype == "string"
    data = load_csv(csv(df), "t", "regression", na_values=["?"])
    assert pd.api.types.is_numeric_dtype(data.X["a"]) and data.X["a"].isna().sum() == 1


@pytest.mark.parametrize(
    ("name", "task", "rows", "columns", "classes"),
    [
        ("breast-cancer", "classification", 569, 30, 2),
        ("diabetes", "regression", 442, 10, None),
        ("wine", "classification", 178, 13, 3),
        ("digits", "classification", 1797, 64, 10),
    ],
)
def test_scikit_learns_bundled_sets_load_by_name(name, task, rows, columns, classes) -> None:
    """No file and no download: the sets come with scikit-learn's wheel."""
    data = load_shared(name, data_dir=None)
    assert (data.name, data.task) == (name, task)
    assert data.X.shape == (rows, columns) and len(data.y) == rows
    assert all(str(dt) == "float64" for dt in data.X.dtypes)
    if classes is None:
        assert data.y.dtype == np.float64
    else:
        assert data.y.dtype == np.int64 and data.y.nunique() == classes


def test_an_unknown_dataset_name_lists_the_known_ones() -> None:
    with pytest.raises(ParameterError, match="dataset='iris'.*digits"):
        load_shared("iris")
