"""``GET /weights``: an audited record, the gate's weights now, or a page of records."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.core import weights as logic
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ContextDep, ServiceDep


async def weights(request: Request, service: ServiceDep, ctx: ContextDep) -> Response:
    result = await logic.weights(service, request.query_params.multi_items(), ctx.request_id)
    return json_response(result)


def router() -> APIRouter:
    return router_of(("GET", "/weights", weights, logic.__doc__ or ""))
