"""Open Inference Protocol v2 (KServe/Seldon): health, model metadata, readiness, infer.

Infer reads a body without ``Content-Type`` as JSON, as tritonclient and KServe clients send
it, and speaks the binary tensor data extension (:mod:`app.codecs.oip_binary`): binary
inputs after the JSON header, and binary outputs when asked for with ``binary_data`` or
``binary_data_output``.

Errors are ``{"error": "..."}``: 400 for any malformed request, 404 for another model's
name, 409 for an ``X-Request-ID`` that names an audited prediction of the model already, 413
over the size limits, 503 while not ready. ``/v2/health/ready`` and the model's
``ready`` answer 503 while loading or draining, as ``/readyz`` does.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.codecs import oip
from app.core.runtime import LoadedModel
from app.core.service import Service
from app.rest.body import BodyHeaders
from app.rest.dataplane import infer_answer, infer_headers
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep, context_of, service_of
from app.rest.routes.health import audit_unready


def served(service: Service, name: str) -> LoadedModel:
    return oip.served(service.runtime, name)


async def server_metadata(request: Request) -> Response:
    return json_response(
        {"name": "iabma", "version": request.app.version, "extensions": list(oip.EXTENSIONS)}
    )


async def live() -> Response:
    return json_response({"live": True})


async def ready(service: ServiceDep) -> Response:
    ok = service.runtime.ready and audit_unready(service) is None
    return json_response({"ready": ok}, status=200 if ok else 503)


async def model_metadata(name: str, service: ServiceDep) -> Response:
    return json_response(oip.metadata(served(service, name)))


async def model_ready(name: str, service: ServiceDep) -> Response:
    model = served(service, name)
    ok = service.runtime.ready and audit_unready(service) is None
    return json_response({"name": model.name, "ready": ok}, status=200 if ok else 503)


async def infer(name: str, request: Request) -> Response:
    # Reached only past the front middleware, which answers this route itself
    # (app/rest/dataplane.py); kept for the OpenAPI document and any other mount.
    head = BodyHeaders.of(request.scope["headers"])
    service, ctx = service_of(request), context_of(request)
    content, json_length = await infer_answer(service, ctx, name, head, request.stream())
    response = Response(content)
    response.raw_headers += infer_headers(content, json_length)
    return response


def router() -> APIRouter:
    return router_of(
        ("GET", "", server_metadata, None),
        ("GET", "/health/live", live, None),
        ("GET", "/health/ready", ready, None),
        ("GET", "/models/{name}", model_metadata, None),
        ("GET", "/models/{name}/ready", model_ready, None),
        ("POST", "/models/{name}/infer", infer, oip.__doc__ or ""),
        prefix="/v2",
        tags=["Open Inference Protocol v2"],
    )
