"""A body without ``format`` or ``include`` gets the options the contract's defaults give;
a wrong option is refused naming the place that is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from app.codecs.native import options
from app.contract.request import DEFAULTS
from app.errors import InvalidInput


def test_absent_options_are_the_contracts_defaults() -> None:
    spelled = {"format": DEFAULTS["format"], "include": list(DEFAULTS["include"])}
    assert options({}) == options(spelled)
    assert options({"instances": []}) == options(spelled)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"format": "xml"}, "format", 'expected one of rows, columnar, got "xml"'),
        ({"include": []}, "include", "expected a non-empty list of distinct parts"),
        ({"include": "weights"}, "include", 'got "weights"'),
        ({"include": ["weights", "bogus"]}, "include[1]", 'got "bogus"'),
        ({"include": ["weights", 3]}, "include[1]", "got 3"),
        ({"include": ["weights", "experts", "weights"]}, "include[2]", '"weights" is listed twice'),
    ],
)
def test_a_wrong_option_names_its_place(body: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        options(body)
    [fault] = caught.value.faults
    assert fault.field == field
    assert says in fault.message
