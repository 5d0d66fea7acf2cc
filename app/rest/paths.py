"""The path a request is routed by, and the app's routes by their path templates.

Behind ``--root-path /api`` (an ingress, a shared gateway) uvicorn puts the root path in
``scope["path"]``: ``/api/predict``. Routing strips it and takes ``/predict``, and so must
everything that decides by path (the access guard, the data plane, the error family), or
a check that reads ``/api/predict`` misses the route that is then served. Starlette's own
function is used, so the two can never disagree. A control character in a path is refused:
routing's ``$`` also matches before a final newline, so ``/weights%0A`` would be served as
``/weights``. A 405 names the methods of every route of its path (RFC 9110's ``Allow``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from starlette._utils import get_route_path
from starlette.routing import BaseRoute
from starlette.types import Scope

from app.errors import InvalidPath

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def route_path(scope: Scope) -> str:
    """``scope["path"]`` without the root path: the path routing matches."""
    return get_route_path(scope)


def check_path(path: str) -> None:
    """Raise :class:`InvalidPath` for a path holding a control character (``%00``-``%1F``,
    ``%7F`` once decoded): no route has one, and routing would read a final ``%0A`` as
    the end of the path."""
    found = _CONTROL.search(path)
    if found is not None:
        raise InvalidPath(
            f"holds the control character {found.group()!r} at {found.start()}", field="path"
        )


def printable(path: str) -> str:
    """``path`` with its control characters percent-encoded again, for a log line: a
    refused ``/x%0AGET /weights 200`` must not write a line of its own."""
    return _CONTROL.sub(lambda m: f"%{ord(m.group()):02X}", path)


def routes_by_path(routes: list[BaseRoute]) -> Iterator[tuple[str, BaseRoute]]:
    """Every route with its path template, inside included routers too (FastAPI puts the
    router's own route object in ``scope["route"]``, as found here)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from routes_by_path(inner.routes)
        elif isinstance(path := getattr(route, "path", None), str):
            yield path, route


def allowed_methods(routes: list[BaseRoute], path: str) -> list[str]:
    """The methods of every route whose template matches ``path``, sorted: a path may be
    served by several routes (``GET`` and ``HEAD /livez``), and ``Allow`` names them all."""
    methods: set[str] = set()
    for _, route in routes_by_path(routes):
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(path):
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)
