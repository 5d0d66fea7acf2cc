"""The feature table's hint for names that look like one of the model's."""

from __future__ import annotations

from app.bundle.normalise import Normaliser
from app.inputs import FeatureTable


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
