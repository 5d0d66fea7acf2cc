"""One record's fault fails its own request alone: a row that cannot be built, a row the
database refuses, a request id its model's records hold already (in the trail, or earlier
in the same group), on SQLite and PostgreSQL; and the input orjson cannot write as sent."""

from __future__ import annotations

import json

import orjson

from app.audit.records import canonical_json


def test_an_integer_beyond_64_bits_is_kept_as_the_number_read() -> None:
    # Python's parser keeps 100000000000000000000 as an int, orjson's reads a float: the
    # record is the same whichever parsed the body, and orjson can write both.
    as_int = [{"x": 10**20, "y": -(10**20), "c": 10**400, "n": None, "z": 2**64 - 1}]
    as_float = [{"x": 1e20, "y": -1e20, "c": "1" + "0" * 400, "n": None, "z": 2**64 - 1}]
    assert canonical_json(as_int) == canonical_json(as_float)
    assert json.loads(canonical_json(as_int)) == as_float
    strict = json.loads(b'[{"z": 18446744073709551615, "y": -100000000000000000000}]')
    fast = orjson.loads(b'[{"z": 18446744073709551615, "y": -100000000000000000000}]')
    assert canonical_json(strict) == canonical_json(fast)
