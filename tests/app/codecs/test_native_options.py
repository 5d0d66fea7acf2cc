"""A body without ``format`` or ``include`` gets the options the contract's defaults give."""

from __future__ import annotations

from app.codecs.native import options
from app.contract.request import DEFAULTS


def test_absent_options_are_the_contracts_defaults() -> None:
    spelled = {"format": DEFAULTS["format"], "include": list(DEFAULTS["include"])}
    assert options({}) == options(spelled)
    assert options({"instances": []}) == options(spelled)
