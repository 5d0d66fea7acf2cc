"""The feature table's two paths on a mixed table (numbers and categories): what each
takes, what sends a batch from the fast path to the exact one, and how every fault is
named; the query string's reading; a table built from a real bundle's manifest."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app.bundle.loader import read_manifest
from app.bundle.normalise import CategoryMap, Normaliser
from app.core.inputs import MAX_FAULTS, FeatureTable, NonFinite, json_type, query_row
from app.errors import InvalidInput
from tests.support.bundles import Bundles

RULE = Normaliser()


def mixed(unknown_to_missing: bool = False) -> FeatureTable:
    return FeatureTable(
        names=("x", "city", "y"),
        inputs={"x": "in_x", "city": "in_city", "y": "in_y"},
        numeric=frozenset({"x", "y"}),
        categories={"city": CategoryMap(("Bern", "Genf"), RULE)},
        rule=RULE,
        missing_token="__m__",
        map_unknown_to_missing=unknown_to_missing,
    )


def field(i: int, name: str) -> str:
    return f"instances[{i}].{name}"


def faults(table: FeatureTable, rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(InvalidInput) as err:
        table.columns(rows, field)
    return [(f.code, f.field) for f in err.value.faults]


def test_non_finite_tokens_are_shown_as_sent() -> None:
    token = NonFinite("-Infinity")
    assert repr(token) == "-Infinity" and json_type(token) == "-Infinity"
    assert json_type("abc") == '"abc"' and json_type(None) == "null"


def test_both_paths_give_the_same_columns() -> None:
    t = mixed()
    rows = [{"x": 1.5, "city": "Bern", "y": None}, {"x": 2, "city": None, "y": -3.0}]
    fast = t.columns_fast({n: [r[n] for r in rows] for n in t.names})
    exact = t._columns_exact(rows, field)
    assert fast is not None and set(fast) == set(exact) == {"in_x", "in_city", "in_y"}
    for name in fast:
        assert fast[name].shape == exact[name].shape == (2, 1)
        assert fast[name].dtype == exact[name].dtype
    assert fast["in_city"][:, 0].tolist() == exact["in_city"][:, 0].tolist() == ["Bern", "__m__"]
    assert fast["in_x"][:, 0].tolist() == [1.5, 2.0] and exact["in_x"].dtype == np.float32
    assert np.isnan(fast["in_y"][0, 0]) and fast["in_y"][1, 0] == -3.0
    assert t.columns(rows, field)["in_city"][:, 0].tolist() == ["Bern", "__m__"]


@pytest.mark.parametrize(
    "data",
    [
        {"x": ["1.5"], "city": ["Bern"], "y": [1.0]},  # text in a numeric column
        {"x": [1.0], "city": ["bern"], "y": [1.0]},  # a category to normalise
        {"x": [1.0], "city": [["Bern"]], "y": [1.0]},  # unhashable
        {"x": [True], "city": ["Bern"], "y": [1.0]},  # a bool is not a number
        {"x": np.array(["a"]), "city": ["Bern"], "y": [1.0]},  # a tensor of text
        {"x": [1.0], "city": ["Bern"]},  # a feature missing
        {"x": [1.0, 2.0], "city": ["Bern", "Bern"], "y": [1.0]},  # ragged numbers
    ],
    ids=["text", "normalise", "unhashable", "bool", "text-tensor", "missing", "ragged"],
)
def test_anything_unusual_goes_to_the_exact_path(data: dict[str, Any]) -> None:
    assert mixed().columns_fast(data) is None


def test_a_raw_numeric_tensor_is_taken_whole() -> None:
    t = mixed()
    got = t.columns_fast(
        {"x": np.array([1, 2], dtype="<i8"), "city": ["Genf", None], "y": np.array([0.5, np.nan])}
    )
    assert got is not None and got["in_x"][:, 0].tolist() == [1.0, 2.0]
    assert np.isnan(got["in_y"][1, 0]) and got["in_city"][:, 0].tolist() == ["Genf", "__m__"]


def test_every_fault_of_a_batch_is_named_in_order() -> None:
    rows = [
        {"x": "abc", "city": "Paris", "y": 1.0, "z": 1},
        {"x": NonFinite("NaN"), "city": NonFinite("Infinity")},
    ]
    assert faults(mixed(), rows) == [
        ("unknown_feature", "instances[0].z"),
        ("wrong_type", "instances[0].x"),
        ("unknown_category", "instances[0].city"),
        ("not_finite", "instances[1].x"),
        ("wrong_type", "instances[1].city"),
        ("missing_feature", "instances[1].y"),
    ]


def test_an_unknown_category_may_be_read_as_missing() -> None:
    got = mixed(unknown_to_missing=True).columns([{"x": 1, "city": "Paris", "y": 2}], field)
    assert got["in_city"][:, 0].tolist() == ["__m__"]
    # Another fault of the category is still one.
    assert mixed(True).category("city", NonFinite("NaN"))[1] is not None
    assert mixed(True).category("city", [1])[1] is not None


def test_faults_stop_at_the_cap_after_the_row_that_reaches_it() -> None:
    rows = [{"x": "bad", "city": "Bern", "y": 1.0} for _ in range(MAX_FAULTS + 5)]
    found = faults(mixed(), rows)
    assert len(found) == MAX_FAULTS
    assert found[-1] == ("wrong_type", f"instances[{MAX_FAULTS - 1}].x")
    twice = [{"x": "bad", "city": "bad", "y": 1.0} for _ in range(MAX_FAULTS)]
    assert len(faults(mixed(), twice)) == MAX_FAULTS


def test_a_number_as_read() -> None:
    t = mixed()
    assert t.number(None) == (None, None)
    assert t.number(2) == (2.0, None)
    assert t.number(" 3.5 ") == (3.5, None)  # text, as the bundle's rule reads it
    value, problem = t.number(float("nan"))
    assert value is None and problem is not None and problem[0] == "not_finite"
    assert "nan is not a finite number" in problem[1].lower()
    value, problem = t.number(NonFinite("NaN"))
    assert problem == ("not_finite", "NaN is not allowed; send null for a missing value")


def test_the_query_string_is_read_by_the_features_kind() -> None:
    t = mixed()
    row = query_row({"x": " 1e3 ", "y": "", "city": "12", "w": "-inf", "v": "5"}, t)
    assert row == {"x": 1000.0, "y": None, "city": "12", "w": "-inf", "v": "5"}
    for text in ("-inf", "Infinity", "+INF"):
        got = query_row({"x": text}, t)["x"]
        assert isinstance(got, NonFinite) and got.token == text
    assert query_row({"x": "1e3x"}, t) == {"x": "1e3x"}
    assert query_row({"x": ".5", "y": "-2."}, t) == {"x": 0.5, "y": -2.0}


def test_a_table_from_a_real_manifest(bundles: Bundles) -> None:
    manifest = read_manifest(bundles.store / "credit" / bundles.credit.version)
    t = FeatureTable.from_manifest(manifest, "missing")
    assert t.names == tuple(f.name for f in manifest.features)
    assert t.numeric == {f.name for f in manifest.features if f.dtype == "float"}
    assert set(t.categories) == {f.name for f in manifest.features if f.categories}
    assert t.inputs == {f.name: f.input for f in manifest.features}
    assert (
        t.map_unknown_to_missing
        and not FeatureTable.from_manifest(manifest, "reject").map_unknown_to_missing
    )
    assert t.missing_token == manifest.missing_token and t.names_text == ", ".join(t.names)
    assert t.numeric_names == tuple(n for n in t.names if n in t.numeric)
    assert t.categorical_names == tuple(n for n in t.names if n not in t.numeric)
    row = bundles.credit.instances([0])[0]
    got = t.columns([row], field)
    assert set(got) == set(t.inputs.values())


def test_a_row_with_a_stray_key_in_place_of_a_feature_is_named() -> None:
    """As many keys as features, one of them not a feature: the exact path names both."""
    assert faults(mixed(), [{"x": 1.0, "city": "Bern", "why": 2.0}]) == [
        ("unknown_feature", "instances[0].why"),
        ("missing_feature", "instances[0].y"),
    ]
    assert faults(mixed(), [{"city": "Bern", "y": 2.0}]) == [("missing_feature", "instances[0].x")]


def test_a_tensor_of_booleans_is_no_numbers() -> None:
    assert mixed().columns_fast({"x": np.array([True]), "city": ["Bern"], "y": [1.0]}) is None


def test_a_non_finite_token_for_a_category_is_named_as_sent() -> None:
    assert mixed().category("city", NonFinite("-Infinity")) == (
        None,
        ("wrong_type", "expected a string or null, got -Infinity"),
    )


def test_only_an_empty_name_is_pointed_at_the_unnamed_columns() -> None:
    t = FeatureTable(("Unnamed: 0", "b"), {"Unnamed: 0": "f0", "b": "f1"},
                     frozenset({"Unnamed: 0", "b"}), {}, RULE, "__m__", False)  # fmt: skip
    assert "Unnamed: 0" in t.near_hint("")
    assert t.near_hint("zzz") == ""
