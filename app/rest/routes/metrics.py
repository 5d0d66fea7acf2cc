"""``GET /metrics``: every worker's metrics, in the Prometheus text format or OpenMetrics.

Not mounted here when ``IABMA_METRICS_PORT`` serves them on a port of their own
(:mod:`app.metrics.port`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep


async def metrics(request: Request, service: ServiceDep) -> Response:
    content, content_type = service.scrape(request.headers.get("accept"))
    return Response(content, media_type=content_type)


def router() -> APIRouter:
    described = "Prometheus exposition of all worker processes of this server."
    return router_of(("GET", "/metrics", metrics, described))
