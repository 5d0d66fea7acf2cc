"""The one normalisation rule, cell by cell: what is missing, a number, a category."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pandas._libs.parsers import STR_NA_VALUES

from app.bundle.normalise import OTHER_CATEGORY, PANDAS_NA_VALUES, CategoryMap, rule_for

DEFAULT = rule_for()


def test_the_default_missing_strings_are_pandas_own() -> None:
    assert set(PANDAS_NA_VALUES) == set(STR_NA_VALUES)
    frame = pd.read_csv(pd.io.common.StringIO("a\nNA\nunknown\n?\nnone\n"), dtype=str)
    read_as_missing = frame["a"].isna().tolist()
    ours = [DEFAULT.is_missing(v) for v in ["NA", "unknown", "?", "none"]]
    assert ours == read_as_missing == [True, False, False, False]


@pytest.mark.parametrize(
    ("value", "number", "problem"),
    [
        (3, 3.0, None), (2.5, 2.5, None), ("3.5", 3.5, None), (" 1e3 ", 1000.0, None),
        ("-.5", -0.5, None), ("NA", None, None), ("", None, None), (None, None, None),
        ("abc", None, "wrong_type"), ("٣", None, "wrong_type"),  # ASCII digits only
        ("1_000", None, "wrong_type"), ("0x10", None, "wrong_type"), (True, None, "wrong_type"),
        ([1], None, "wrong_type"), ({"a": 1}, None, "wrong_type"), (10**400, math.inf, None),
    ],
)  # fmt: skip
def test_numbers(value: object, number: float | None, problem: str | None) -> None:
    got, issue = DEFAULT.number(value)
    assert got == number
    assert (issue[0] if issue else None) == problem


def test_options_change_the_rule_and_are_checked() -> None:
    unknown = rule_for(na_values=["unknown"])
    assert unknown.is_missing("unknown") and unknown.is_missing("NA")
    assert not rule_for(na_values=["unknown"], keep_default_na=False).is_missing("NA")
    assert rule_for(na_values=["N/A"], na_casefold=True).is_missing("n/a ")
    assert rule_for(strip_whitespace=False).number(" 1")[1] is not None
    assert rule_for(numbers_as_text=False).number("1")[1] is not None
    comma = rule_for(decimal=",")
    assert comma.number("3,5") == (3.5, None)
    assert comma.number("1.234,5")[1] is not None  # thousands separators are not guessed
    with pytest.raises(ValueError, match="decimal must be '.' or ','"):
        rule_for(decimal=";")  # type: ignore[arg-type]  # the check under test


@pytest.mark.parametrize(
    ("text", "point", "comma"),
    [
        ("1 234", 1234.0, 1234.0), ("-2\u202f345\u202f678", -2345678.0, -2345678.0),
        ("1\u00a0234,5", None, 1234.5), ("1 234.5", 1234.5, None), ("1'234.50", 1234.5, None),
        ("1.234", 1.234, None), ("1.234,5", None, None), ("1,234", None, 1.234),
        ("12 34", None, None), ("1 2345", None, None), ("1 234 5678", None, None),
        ("1 234'567", None, None), ("012 345", None, None), ("0 001", None, None),
        ("\u22125", -5.0, -5.0), ("\u22121'234.5", -1234.5, None), ("5\u2212", None, None),
    ],
)  # fmt: skip
def test_digits_grouped_by_spaces_or_apostrophes_are_read(
    text: str, point: float | None, comma: float | None
) -> None:
    """Spaces and apostrophes are never a decimal mark, so grouped digits are unambiguous;
    a point or comma between groups could be either, and is refused."""
    assert DEFAULT.number_text(text) == point
    assert rule_for(decimal=",").number_text(text) == comma


@pytest.mark.parametrize(
    ("value", "category", "problem"),
    [
        ("red", "red", None), (" red ", "red", None), ("NA", None, None), (None, None, None),
        (float("nan"), None, None), (3, "3", None), (1.5, "1.50", None), (True, "True", None),
        ("unknown", "unknown", None), ("blue", None, "unknown_category"),
        (7, None, "unknown_category"), ([1], None, "wrong_type"),
    ],
)  # fmt: skip
def test_categories(value: object, category: str | None, problem: str | None) -> None:
    cmap = CategoryMap(("red", "unknown", "3", "1.50", "True"), DEFAULT)
    got, issue = cmap.lookup(value)
    assert got == category
    assert (issue[0] if issue else None) == problem


def test_unknown_category_message_and_the_other_bucket() -> None:
    cmap = CategoryMap(tuple(f"c{i}" for i in range(25)), DEFAULT)
    _, (code, message) = cmap.lookup("zzz")  # type: ignore[misc]  # a problem is expected
    assert code == "unknown_category"
    assert message.startswith('unknown category "zzz"; known: ["c0", "c1"')
    assert "... 5 more]" in message
    capped = CategoryMap(("a", "b"), DEFAULT, other=True)
    assert capped.lookup("z") == (OTHER_CATEGORY, None)
    assert capped.lookup_all(["a", "z", None]) == (["a", OTHER_CATEGORY, None], 0)
    assert CategoryMap(("a",), DEFAULT).lookup_all(["a", "z"]) == (["a", None], 1)


def test_two_categories_with_one_value_make_a_number_ambiguous() -> None:
    cmap = CategoryMap(("1.50", "1.500"), DEFAULT)
    assert cmap.lookup(1.5)[1] is not None  # neither is its text, and both are its value
    assert cmap.lookup("1.50") == ("1.50", None)
    assert CategoryMap(("1.5", "1.50"), DEFAULT).lookup(1.5) == ("1.5", None)  # same text


def test_a_category_with_quotes_is_shown_escaped() -> None:
    """A CSV cell ``"q"`` (quotes and all) is a category of its own; the message writes it
    as JSON would, not as ``""q""``."""
    cmap = CategoryMap(('"q"', "back\\slash"), DEFAULT)
    _, (_, message) = cmap.lookup('say "hi"')  # type: ignore[misc]  # a problem is expected
    known = '["\\"q\\"", "back\\\\slash"]'
    assert message.startswith(f'unknown category "say \\"hi\\""; known: {known}')
