"""Turning any exception into the error body of its route family, via ``errors.STATUS``.

Route paths (the path without the root path) under ``/v2`` speak the Open Inference
Protocol (``{"error": "..."}``, 400 for bad requests); every other path answers
``{"error": {"code", "message", "field"}}``. An unexpected exception is logged with its
traceback and answered 500 without one. A client that hangs up while its body is being
read is logged and counted as 499, not as a 500 with a traceback: the fault, and the
alert, are not the server's. A 405 carries ``Allow``, the methods its path takes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.errors import (
    ClientClosedRequest,
    Fault,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    ServingError,
    Unauthorized,
    as_serving_error,
    native_body,
    oip_body,
    oip_status,
    status_of,
)
from app.rest.paths import allowed_methods, route_path

log = logging.getLogger("iabma.errors")
OIP_PREFIX = "/v2"


def json_response(
    content: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = (
        content
        if isinstance(content, bytes)
        else json.dumps(content, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8"
        )
    )
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_response(
    exc: BaseException,
    path: str,
    status: int | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    err = as_serving_error(exc)
    status = status or status_of(err)
    if isinstance(err, Unauthorized):
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    if path == OIP_PREFIX or path.startswith(OIP_PREFIX + "/"):
        return json_response(oip_body(err), oip_status(status), headers)
    return json_response(native_body(err), status, headers)


def refusal(exc: Exception, path: str) -> Response:
    """The answer to a request that failed with ``exc``; a client that hung up while its
    body was being read is a 499 (ClientClosedRequest), the rest as :func:`error_response`."""
    if isinstance(exc, ClientDisconnect):
        exc = ClientClosedRequest(
            "the client closed the connection before sending the whole body", field="body"
        )
    return error_response(exc, path)


def install_error_handlers(app: FastAPI) -> None:
    async def serving_error(request: Request, exc: Exception) -> Response:
        return error_response(exc, route_path(request.scope))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        method, path, route = request.method, request.url.path, route_path(request.scope)
        if exc.status_code == 404:
            return error_response(NotFound(f"no such route: {method} {path}", "path"), route)
        if exc.status_code == 405:
            err = MethodNotAllowed(f"{method} is not allowed on {path}", "method")
            # Routing names only the first route of the path; RFC 9110 wants them all.
            allow = allowed_methods(request.app.routes, route) or sorted(
                m.strip() for m in (exc.headers or {}).get("Allow", "").split(",") if m.strip()
            )
            return error_response(err, route, headers={"Allow": ", ".join(allow)})
        return error_response(ServingError(str(exc.detail)), route, exc.status_code)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        faults = [
            Fault("invalid_value", ".".join(str(p) for p in e.get("loc", ())), str(e.get("msg")))
            for e in exc.errors()
        ]
        return error_response(
            InvalidInput(faults or [Fault("invalid_value", "", "invalid")]),
            route_path(request.scope),
        )

    async def client_gone(request: Request, exc: Exception) -> Response:
        return refusal(exc, route_path(request.scope))

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(exc, route_path(request.scope))

    app.add_exception_handler(ServingError, serving_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ClientDisconnect, client_gone)
    app.add_exception_handler(Exception, unexpected)
