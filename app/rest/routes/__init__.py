"""Thin HTTP adapters: parse the request, call :mod:`app.core.service`, shape the response."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

# A route: method, path, endpoint, and its description (None: the endpoint's docstring).
Route = tuple[str, str, Callable[..., Any], str | None]


def router_of(*table: Route, **options: Any) -> APIRouter:
    """An APIRouter of ``table``'s routes. Each answers a raw Response: the OpenAPI
    document describes them from the contract (:mod:`app.rest.openapi`)."""
    r = APIRouter(**options)
    for method, path, endpoint, description in table:
        r.add_api_route(
            path, endpoint, methods=[method], response_model=None, description=description
        )
    return r
