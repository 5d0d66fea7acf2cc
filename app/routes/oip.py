"""Open Inference Protocol v2 (KServe/Seldon): health, model metadata, readiness, infer.

Errors are ``{"error": "..."}``: 400 for any malformed request, 404 for another model's
name, 413 over the size limits, 503 while not ready. ``/v2/health/ready`` and the model's
``ready`` answer 503 while loading or draining, as ``/readyz`` does.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app import oip
from app.body import json_body
from app.responses import json_response
from app.schemas import OipError
from app.service import Service

OIP_ERRORS = {code: {"model": OipError} for code in (400, 404, 413, 503)}


def _service(request: Request) -> Service:
    return request.app.state.service


async def server_metadata(request: Request) -> Response:
    return json_response({"name": "iabma", "version": request.app.version, "extensions": []})


async def live() -> Response:
    return json_response({"live": True})


async def ready(request: Request) -> Response:
    ok = _service(request).runtime.ready
    return json_response({"ready": ok}, status=200 if ok else 503)


async def model_metadata(name: str, request: Request) -> Response:
    return json_response(oip.metadata(oip.served(_service(request), name)))


async def model_ready(name: str, request: Request) -> Response:
    service = _service(request)
    model = oip.served(service, name)
    ok = service.runtime.ready
    return json_response({"name": model.name, "ready": ok}, status=200 if ok else 503)


async def infer(name: str, request: Request) -> Response:
    service = _service(request)
    oip.served(service, name)
    body = await json_body(request, service.settings.max_body_bytes)
    state = request.scope["state"]
    return json_response(
        await oip.infer(service, name, body, state["request_id"], state["started"])
    )


def router() -> APIRouter:
    r = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"])
    r.add_api_route("", server_metadata, methods=["GET"], response_model=None)
    r.add_api_route("/health/live", live, methods=["GET"], response_model=None)
    r.add_api_route("/health/ready", ready, methods=["GET"], response_model=None)
    r.add_api_route(
        "/models/{name}", model_metadata, methods=["GET"], response_model=None, responses=OIP_ERRORS
    )
    r.add_api_route(
        "/models/{name}/ready",
        model_ready,
        methods=["GET"],
        response_model=None,
        responses=OIP_ERRORS,
    )
    r.add_api_route(
        "/models/{name}/infer",
        infer,
        methods=["POST"],
        response_model=None,
        responses=OIP_ERRORS,
        description=oip.__doc__ or "",
    )
    return r
