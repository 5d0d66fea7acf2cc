"""``/livez``, ``/readyz`` and ``/models``: is the process up, can it serve, and what."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.core.service import Service
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep

READY = (
    "200 with a bundle loaded; 503 while loading, draining after SIGTERM, or while audit "
    "commits have failed for IABMA_AUDIT_UNREADY_SECONDS (`reason` names the cause)."
)
MODELS = (
    "The served bundle's manifest: experts, their test metrics, the version; and "
    "`rollout`: whether this worker follows LATEST, and the version it last refused."
)


async def livez() -> Response:
    return json_response({"status": "alive"})


def audit_unready(service: Service) -> str | None:
    """Why the trail makes this replica unready (app.audit.health), or None."""
    writer = service.writer
    return writer.health.unready() if writer is not None else None


async def readyz(service: ServiceDep) -> Response:
    runtime = service.runtime
    model = runtime.current
    unready = audit_unready(service)
    if unready is not None and not runtime.draining:
        return json_response({"status": "audit_unavailable", "reason": unready}, status=503)
    if runtime.ready and model is not None:
        return json_response({"status": "ready", "model": model.name, "version": model.version})
    reason = "draining" if runtime.draining else "loading"
    return json_response({"status": reason}, status=503)


async def models(service: ServiceDep) -> Response:
    summary = service.runtime.require().summary
    return json_response({**summary, "rollout": service.follower.status()})


def router() -> APIRouter:
    r = router_of(
        ("GET", "/livez", livez, "200 while the process runs."),
        ("GET", "/readyz", readyz, READY),
        ("GET", "/models", models, MODELS),
    )
    for path, probe in (("/livez", livez), ("/readyz", readyz)):
        # Uptime monitors and some load balancers probe with HEAD; the status is the answer.
        r.add_api_route(path, probe, methods=["HEAD"], response_model=None, include_in_schema=False)
    return r
