"""The one ASGI middleware in front of every request: its id, access control, the data
plane, its metrics and its log line.

A client's ``X-Request-ID`` is used (and echoed) when it is 1-128 characters of letters,
digits or ``._:/+=-``; anything else is refused with 400 naming the header, since the id
ends up in the audit trail and in the logs. Without the header a random id is made.

One layer rather than one per concern: each ASGI layer wraps ``send`` and adds a call per
message, and a single-row prediction is short enough for that to show (docs/design.md,
"The request path"). ``POST /predict`` and OIP infer are answered here
(:mod:`app.rest.dataplane`); everything else goes on to FastAPI. CORS, when configured,
runs between the request id and the access guard, as its own layer.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.context import REQUEST_ID, SCOPE_KEY, RequestContext, new_request_id
from app.core.logs import AccessLog
from app.core.service import Service
from app.errors import InvalidHeader, StartupRefused
from app.rest.access import AccessGuard
from app.rest.dataplane import DataPlane
from app.rest.paths import printable, route_path
from app.rest.responses import error_response

CORS_HEADERS = ["Authorization", "Content-Type", "Content-Encoding", "X-API-Key", "X-Request-ID"]


class Front:
    """Pure ASGI middleware; ``routes`` are the app's, read once its routers are included."""

    def __init__(
        self,
        app: ASGIApp,
        service: Service,
        guard: AccessGuard,
        routes: list[BaseRoute],
        cors_origins: list[str] | None = None,
    ) -> None:
        self.app = app
        self.service = service
        self.guard = guard
        guard.cover(routes)
        self.plane = DataPlane(service, routes)
        self.access = AccessLog(service.settings)
        self.inner: ASGIApp = self._guarded
        self.cors = bool(cors_origins)
        if cors_origins:
            self.inner = CORSMiddleware(
                self._guarded,
                allow_origins=cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=CORS_HEADERS,
                expose_headers=["X-Request-ID"],
            )

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
        valid = given is None or REQUEST_ID.fullmatch(given) is not None
        request_id = given if valid and given is not None else new_request_id()
        scope[SCOPE_KEY] = RequestContext(request_id, started)
        echo = (b"x-request-id", request_id.encode("latin-1"))
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), echo]}
            await send(message)

        try:
            if not valid:
                fault = InvalidHeader(
                    "must be 1-128 characters of letters, digits or ._:/+=-",
                    field="header X-Request-ID",
                )
                await error_response(fault, route_path(scope))(scope, receive, send_with_id)
            elif self.cors:
                await self.inner(scope, receive, send_with_id)
            elif (refused := self.guard.refusal(scope)) is not None:
                await refused(scope, receive, send_with_id)
            elif (handler := self.plane.match(scope)) is not None:
                # The data plane's answers carry the id themselves: no wrapped send.
                status = await handler(scope, receive, send, echo)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            self._observe(scope, request_id, status, time.perf_counter() - started)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """What runs behind CORS: the same order as without it."""
        refused = self.guard.refusal(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        handler = self.plane.match(scope)
        if handler is None:
            await self.app(scope, receive, send)
            return
        await handler(scope, receive, send, None)

    def _observe(self, scope: Scope, request_id: str, status: int, seconds: float) -> None:
        route_obj: Any = scope.get("route")
        route = getattr(route_obj, "path", None) or "unmatched"
        method = scope["method"]
        model = self.service.labels()
        self.service.metrics.request_done((*model, route, method, str(status)), seconds)
        path = printable(scope["path"])
        fields = {
            "request_id": request_id,
            "method": method,
            "route": route,
            "path": path,
            "status": status,
            "latency_ms": round(seconds * 1000.0, 3),
            "model_version": model[1],
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
