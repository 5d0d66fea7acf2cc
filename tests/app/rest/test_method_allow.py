"""Every 405 names the methods its path takes in ``Allow`` (RFC 9110), for every route of
the app, including paths served by more than one route (``GET`` and ``HEAD /livez``)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

import pytest

from app.rest.paths import routes_by_path
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE")
# A value for each path parameter: the served model, and a file the console serves.
PARAMS = {"name": "demo"}


@pytest.fixture(scope="module")
def demo(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiHarness]:
    with AsgiHarness(make_settings(bundles.store, tmp_path_factory.mktemp("allow"))) as h:
        yield h


def served_paths(h: AsgiHarness) -> dict[str, set[str]]:
    """Every path template of the app, with the methods of all its routes."""
    methods: dict[str, set[str]] = defaultdict(set)
    for path, route in routes_by_path(h.app.routes):
        methods[path] |= set(getattr(route, "methods", None) or ())
    return dict(methods)


def concrete(template: str) -> str:
    return re.sub(r"\{(\w+)[^}]*\}", lambda m: PARAMS.get(m.group(1), "x"), template)


def test_every_405_carries_allow_with_the_paths_methods(demo: AsgiHarness) -> None:
    paths = served_paths(demo)
    assert {"/predict", "/livez", "/v2/models/{name}/infer", "/audit/probe"} <= set(paths)
    checked = 0
    for template, taken in paths.items():
        assert taken, template
        for method in (m for m in METHODS if m not in taken):
            r = demo.request(method, concrete(template))
            assert r.status_code == 405, (method, template, r.status_code, r.text)
            allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
            assert allow == taken, (method, template, r.headers.get("allow"))
            checked += 1
    assert checked >= 5 * len(paths)


def test_a_path_of_two_routes_names_both(demo: AsgiHarness) -> None:
    r = demo.request("PUT", "/livez")
    assert (r.status_code, r.headers["allow"]) == (405, "GET, HEAD")
    r = demo.request("DELETE", "/audit/probe")
    assert (r.status_code, r.headers["allow"]) == (405, "GET, POST")
