"""Error answers of every shape become the right ClientError, with the service's fields."""

from __future__ import annotations

import json

from app.client import (
    AuthenticationError,
    FieldError,
    HTTPError,
    InvalidInput,
    NotFound,
    ServerError,
    ServiceUnavailable,
)
from app.client.errors import from_answer


def test_native_body_with_details() -> None:
    body = {
        "error": {
            "code": "wrong_type",
            "message": "instances[0].a: expected a number",
            "field": "instances[0].a",
            "details": [
                {"code": "wrong_type", "message": "m1", "field": "instances[0].a"},
                {"code": "missing_feature", "message": "m2", "field": "instances[1].b"},
            ],
        }
    }
    err = from_answer(422, json.dumps(body).encode(), "rid-1", attempts=1)
    assert type(err) is InvalidInput
    assert (err.status, err.code, err.field, err.request_id) == (
        422, "wrong_type", "instances[0].a", "rid-1",
    )  # fmt: skip
    assert err.details[1] == FieldError("missing_feature", "m2", "instances[1].b")
    assert str(err) == "422 wrong_type [instances[0].a]: instances[0].a: expected a number"


def test_oip_proxy_and_empty_bodies() -> None:
    oip = from_answer(404, b'{"error": "no model named x"}', None)
    assert type(oip) is NotFound and oip.message == "no model named x" and oip.code == "http_404"
    html = from_answer(502, b"<html>Bad Gateway</html>", None, attempts=3)
    assert type(html) is ServiceUnavailable and "Bad Gateway" in html.message
    assert html.attempts == 3
    assert type(from_answer(500, b"", None)) is ServerError
    assert type(from_answer(401, b"{}", None)) is AuthenticationError
    teapot = from_answer(418, b"[1]", None)
    assert type(teapot) is HTTPError and teapot.message == "[1]"
