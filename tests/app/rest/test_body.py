"""Parsing request bodies directly: the faults that need bodies larger than the HTTP tests'
limits."""

from __future__ import annotations

import sys

import pytest

from app.errors import InvalidJSON
from app.rest.body import parse_json


def test_an_integer_past_pythons_digit_limit_is_a_clear_fault() -> None:
    digits = sys.get_int_max_str_digits() + 1
    raw = b'{"instances": [{"x1": ' + b"9" * digits + b', "x2": 1}]}'
    with pytest.raises(InvalidJSON) as info:
        parse_json(raw)
    fault = info.value.fault
    assert fault.field == "body"
    assert fault.message == f"a number has more than {digits - 1} digits"
    assert "sys." not in fault.message  # Python's advice is for the server, not the client


def test_a_long_integer_within_the_limit_is_read() -> None:
    raw = b'{"instances": [{"x1": ' + b"9" * 400 + b"}]}"
    assert parse_json(raw)["instances"][0]["x1"] == int("9" * 400)
