"""``POST /admin/reload``: re-resolve LATEST (or the pinned version) and swap atomically."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep

DESCRIPTION = (
    "Needs `Authorization: Bearer <IABMA_ADMIN_TOKEN>`; 404 when no token is configured. "
    "A bundle that fails verification is refused with 409 and the serving version stays. "
    "Each worker process reloads on its own."
)


async def reload(request: Request, service: ServiceDep) -> Response:
    return json_response(await service.reload(request.headers.get("authorization")))


def router() -> APIRouter:
    return router_of(("POST", "/admin/reload", reload, DESCRIPTION))
