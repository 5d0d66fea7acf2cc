"""The feature table's hint for names that look like one of the model's, and the category
map's for categories that look like a known one."""

from __future__ import annotations

from app.bundle.normalise import CategoryMap, Normaliser
from app.core.inputs import FeatureTable


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
