"""``POST /feedback`` and ``GET /performance``: outcomes in, realised scores out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.core import feedback as ingest
from app.core import performance as report
from app.core.access import presented_key
from app.rest.body import json_body
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep


async def feedback(request: Request, service: ServiceDep) -> Response:
    body = await json_body(request, service.settings.max_body_bytes)
    key = presented_key(request.scope["headers"])  # checked by the access guard
    return json_response(await ingest.feedback(service, body, key))


async def performance(request: Request, service: ServiceDep) -> Response:
    return json_response(await report.performance(service, request.query_params.multi_items()))


def router() -> APIRouter:
    return router_of(
        ("POST", "/feedback", feedback, ingest.__doc__ or ""),
        ("GET", "/performance", performance, report.__doc__ or ""),
    )
