"""Every route that reads a body refuses it at its size limit before reading it whole: from
Content-Length before a byte of it arrives, else at the first chunk past the limit, while
the client is still sending. The console's forms included: the sign-in form needs no key,
and read 16 MiB whole before refusing it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.rest.routes.console import MAX_FORM_BYTES
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import UvicornHarness
from tests.support.raw_http import answer_to_head, raw_request, stream_until_answered

LIMIT = 4096
API, AUDITOR = "limit-api-key", "limit-auditor-key"
JSON, FORM = "application/json", "application/x-www-form-urlencoded"
# (path, key, content type, limit): every route that reads a body.
BODY_ROUTES = [
    ("/predict", API, JSON, LIMIT),
    ("/v2/models/demo/infer", API, JSON, LIMIT),
    ("/feedback", API, JSON, LIMIT),
    ("/audit/login", None, FORM, MAX_FORM_BYTES),
    ("/audit/probe", AUDITOR, FORM, MAX_FORM_BYTES),
]


@pytest.fixture(scope="module")
def app(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornHarness]:
    settings = make_settings(
        bundles.store, tmp_path_factory.mktemp("limits"), max_body_bytes=LIMIT,
        api_keys=API, auditor_keys=AUDITOR,
    )  # fmt: skip
    with UvicornHarness(settings) as served:
        yield served


def headers(key: str | None, media: str) -> dict[str, str]:
    out = {"Content-Type": media}
    if key is not None:
        out["Authorization"] = f"Bearer {key}"
    return out


def said_too_large(status: int, text: str, limit: int) -> None:
    assert status == 413, text[:300]
    assert "body" in text and str(limit) in text, text[:300]


@pytest.mark.parametrize(("path", "key", "media", "limit"), BODY_ROUTES)
def test_a_declared_length_over_the_limit_is_refused_before_any_body(
    app: UvicornHarness, path: str, key: str | None, media: str, limit: int
) -> None:
    declared = {**headers(key, media), "Content-Length": str(16 * 1024 * 1024)}
    r = answer_to_head(app.base_url, "POST", path, declared, timeout=10)
    said_too_large(r.status, r.text, limit)


@pytest.mark.parametrize(("path", "key", "media", "limit"), BODY_ROUTES)
def test_a_streamed_body_is_refused_at_the_limit_while_it_is_still_coming(
    app: UvicornHarness, path: str, key: str | None, media: str, limit: int
) -> None:
    most = 16 * 1024 * 1024
    r, sent = stream_until_answered(
        app.base_url, "POST", path, headers(key, media), b"k" * 8192, most, timeout=30
    )
    said_too_large(r.status, r.text, limit)
    assert sent < most, "answered only once the whole body was sent"


@pytest.mark.parametrize(("path", "key", "media", "limit"), BODY_ROUTES)
def test_a_body_just_over_the_limit_is_a_413_and_one_at_it_is_read(
    app: UvicornHarness, path: str, key: str | None, media: str, limit: int
) -> None:
    over = raw_request(app.base_url, "POST", path, headers(key, media), b" " * (limit + 1))
    said_too_large(over.status, over.text, limit)
    at = raw_request(app.base_url, "POST", path, headers(key, media), b" " * limit)
    assert at.status != 413, at.text[:300]


def test_the_server_still_serves_after_the_refusals(app: UvicornHarness) -> None:
    r = app.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]},
                 headers={"Authorization": f"Bearer {API}"})  # fmt: skip
    assert r.status_code == 200, r.text
