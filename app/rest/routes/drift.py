"""``GET /drift``: input drift against the bundle's training rows."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.core import input_drift
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep


async def drift(service: ServiceDep) -> Response:
    return json_response(await input_drift.drift(service))


def router() -> APIRouter:
    return router_of(("GET", "/drift", drift, input_drift.__doc__ or ""))
