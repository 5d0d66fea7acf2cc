"""``GET /metrics`` in the Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.metrics import CONTENT_TYPE
from app.routes.deps import ServiceDep


async def metrics(service: ServiceDep) -> Response:
    writer = service.writer
    if writer is not None:
        service.metrics.audit_depth.set(service.labels(), writer.depth)
    return Response(service.metrics.render(), media_type=CONTENT_TYPE)


def router() -> APIRouter:
    r = APIRouter()
    r.add_api_route(
        "/metrics",
        metrics,
        methods=["GET"],
        response_model=None,
        description="Prometheus text exposition.",
    )
    return r
