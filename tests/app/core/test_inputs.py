"""The feature table's hint for names that look like one of the model's, and the category
map's for categories that look like a known one."""

from __future__ import annotations

import numpy as np
import pytest

from app.bundle.normalise import CategoryMap, Normaliser
from app.core.inputs import FLOAT32_MAX, FeatureTable
from app.errors import InvalidInput


def table(*names: str) -> FeatureTable:
    return FeatureTable(
        names=names,
        inputs={n: f"f{i}" for i, n in enumerate(names)},
        numeric=frozenset(names),
        categories={},
        rule=Normaliser(),
        missing_token="__missing__",
        map_unknown_to_missing=False,
    )


def test_a_no_break_space_in_the_models_name_is_shown_escaped() -> None:
    # Found in a German export: the header "Score\u00a0%" printed exactly like "Score %".
    hint = table("Alter", "Score\u00a0%").near_hint("score %")
    assert hint.startswith('; did you mean "Score\\u00a0%"? names match exactly')


def test_names_that_look_alike_and_names_that_do_not() -> None:
    t = table("Wohnfläche m²", "x1")
    assert 'did you mean "Wohnfläche m²"' in t.near_hint("Wohnfla\u0308che  M2")  # NFD, ² as 2
    assert t.near_hint("x1") == ""  # the name itself
    assert t.near_hint("x2") == ""  # a different name


def test_the_long_name_hinted_is_shown_whole() -> None:
    name = "Average monthly recurring revenue per account " * 4
    assert f'did you mean "{name.strip()}"?' in table(name.strip()).near_hint(name)


def test_an_empty_name_is_pointed_at_the_models_unnamed_columns() -> None:
    # csv.DictReader names a column with an empty header "", pandas "Unnamed: 0".
    t = table("Unnamed: 0", "Unnamed: 3.1", "x1")
    assert '"Unnamed: 0" or "Unnamed: 3.1" by this model' in t.near_hint("")
    assert "Unnamed" in t.near_hint(" ")
    # A CSV read as utf-8 rather than utf-8-sig: the empty first header is a byte-order mark.
    assert t.near_hint("\ufeff").startswith(' "\\ufeff"; a column with an empty header')
    assert table("x1").near_hint("") == ""


def test_a_category_in_another_form_or_case_is_hinted_and_shown_apart() -> None:
    cats = CategoryMap(("Köln", "Zürich", "Tokyo 🗼"), Normaliser())
    _, problem = cats.lookup("Zu\u0308rich")  # NFD, as macOS file names give it
    assert problem is not None and problem[0] == "unknown_category"
    assert problem[1].startswith('unknown category "Zu\\u0308rich"; did you mean "Zürich"?')
    _, problem = cats.lookup("Tokyo 🗼\ufe0f")  # an emoji with its variation selector
    assert problem is not None and 'did you mean "Tokyo 🗼"?' in problem[1]
    assert '"Tokyo 🗼\\ufe0f"' in problem[1]
    _, problem = cats.lookup("zurich")  # typed without the umlaut
    assert problem is not None and 'did you mean "Zürich"?' in problem[1]
    _, problem = cats.lookup("Berlin")
    assert problem is not None and "did you mean" not in problem[1]
    assert cats.lookup("Zürich") == ("Zürich", None)


# Numbers the graphs cannot take, whichever path reads them: the fast one (a column at a
# time, numpy) and the exact one (a value at a time, naming the field). Negative ones too:
# a check of `x > max` alone served -1e39 as -inf.
BEYOND = [1e39, -1e39, -3.5e38, float(np.nextafter(FLOAT32_MAX, np.inf)), 10**39, -(10**39)]
BEYOND += [-float(np.nextafter(FLOAT32_MAX, np.inf)), 10**400, -(10**400)]


def field(i: int, name: str) -> str:
    return f"instances[{i}].{name}"


@pytest.mark.parametrize("value", BEYOND, ids=repr)
def test_a_number_beyond_float32_is_refused_on_both_paths(value: float | int) -> None:
    t = table("a", "b")
    rows = [{"a": 1.0, "b": 2.0}, {"a": value, "b": -2.0}]
    assert t.columns_fast({"a": [1.0, value], "b": [2.0, -2.0]}) is None
    with pytest.raises(InvalidInput) as err:
        t.columns(rows, field)
    (fault,) = err.value.faults
    assert (fault.code, fault.field) == ("out_of_range", "instances[1].a")
    assert "outside the float32 range" in fault.message
    # The exact path alone (a row with a key out of place sends a batch there).
    _, problem = t.number(value)
    assert problem is not None and problem[0] == "out_of_range"


@pytest.mark.parametrize("dtype", ["<f8", "<f4"])
def test_a_raw_tensor_beyond_float32_goes_to_the_exact_path(dtype: str) -> None:
    # OIP binary and gRPC data: float64 beyond float32, and float32's own infinities.
    big = np.array([1.0, -1e39 if dtype == "<f8" else -np.inf], dtype=dtype)
    assert table("a").columns_fast({"a": big}) is None


def test_the_float32_range_itself_is_taken_on_both_paths() -> None:
    t = table("a")
    edges = [FLOAT32_MAX, -FLOAT32_MAX, 10**20, -(10**20), 2**64, None]
    fast = t.columns_fast({"a": edges})
    exact = t._columns_exact([{"a": v} for v in edges], field)
    assert fast is not None
    for got in (fast["f0"], exact["f0"]):
        assert got.dtype == np.float32 and np.isfinite(got[:-1]).all() and np.isnan(got[-1])
        assert (
            got[:5, 0].tolist()
            == np.float32([FLOAT32_MAX, -FLOAT32_MAX, 1e20, -1e20, 2**64]).tolist()
        )


def test_an_integer_too_long_for_float64_is_out_of_range_not_infinite() -> None:
    _, problem = table("a").number(10**400)
    assert problem is not None and problem[0] == "out_of_range"
    assert "(401 characters) is outside the float32 range" in problem[1]
    rule = Normaliser(numbers_as_text=True)
    text = FeatureTable(("a",), {"a": "f0"}, frozenset({"a"}), {}, rule, "__m__", False)
    for spelt in ("-1e39", "1" + "0" * 400):
        _, problem = text.number(spelt)
        assert problem is not None and problem[0] == "out_of_range", spelt
    # An infinity a client sent (raw tensor data, or a literal that overflows) says so.
    _, problem = table("a").number(float("-inf"))
    assert problem is not None and problem[0] == "not_finite"
