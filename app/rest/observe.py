"""ASGI middleware around every request: its id, its metrics and its log line.

A client's ``X-Request-ID`` is used (and echoed) when it is 1-128 characters of letters,
digits or ``._:/+=-``; anything else is refused with 400 naming the header, since the id
ends up in the audit trail and in the logs. Without the header a random id is made.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.context import REQUEST_ID, SCOPE_KEY, RequestContext, new_request_id
from app.core.logs import AccessLog
from app.core.service import Service
from app.errors import InvalidHeader, StartupRefused
from app.rest.responses import error_response


class RequestObserver:
    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service
        self.access = AccessLog(service.settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _one_line_refusal(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = None
        for key, value in scope["headers"]:
            if key == b"x-request-id":
                given = value.decode("latin-1")
                break
        valid = given is None or REQUEST_ID.match(given) is not None
        request_id = given if valid and given is not None else new_request_id()
        scope[SCOPE_KEY] = RequestContext(request_id, started)
        status = 500
        echo = (b"x-request-id", request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), echo]}
            await send(message)

        try:
            if valid:
                await self.app(scope, receive, send_with_id)
            else:
                fault = InvalidHeader(
                    "must be 1-128 characters of letters, digits or ._:/+=-",
                    field="header X-Request-ID",
                )
                await error_response(fault, scope["path"])(scope, receive, send_with_id)
        finally:
            self._observe(scope, request_id, status, time.perf_counter() - started)

    def _observe(self, scope: Scope, request_id: str, status: int, seconds: float) -> None:
        route_obj: Any = scope.get("route")
        route = getattr(route_obj, "path", None) or "unmatched"
        method = scope["method"]
        labels = (*self.service.labels(), route, method, str(status))
        self.service.metrics.requests.inc(labels)
        self.service.metrics.request_seconds.observe(labels, seconds)
        path = scope["path"]
        fields = {
            "request_id": request_id,
            "method": method,
            "route": route,
            "path": path,
            "status": status,
            "latency_ms": round(seconds * 1000.0, 3),
            "model_version": labels[1],
        }
        if self.service.tracing.enabled:
            # Still inside the instrumentation's server span, which wraps this middleware.
            fields["trace_id"] = self.service.tracing.trace_id()
        self.access.write(method, path, status, fields)


def _one_line_refusal(send: Send) -> Send:
    """Starlette reports a failed start-up with the whole traceback; a refusal we raised on
    purpose (StartupRefused) is reported as its one line instead."""
    marker = f"{StartupRefused.__module__}.{StartupRefused.__name__}: "

    async def send_clean(message: Message) -> None:
        if message["type"] == "lifespan.startup.failed":
            lines = str(message.get("message", "")).strip().splitlines()
            if lines and marker in lines[-1]:
                text = "cannot start: " + lines[-1].split(marker, 1)[1]
                message = {**message, "message": text}
        await send(message)

    return send_clean
