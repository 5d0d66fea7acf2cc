"""The two data-plane routes, ``POST /predict`` and OIP infer, as plain ASGI.

FastAPI keeps every other route. Its routing, request object, exception middleware and
response class cost more per single-row prediction than the graph (docs/design.md,
"The request path"), so :class:`app.rest.front.Front` hands these two routes here
directly. The answers themselves are made by :func:`predict_answer` and
:func:`infer_answer`, which the FastAPI endpoints of the same routes call too: the
routes stay in the OpenAPI document, and answer alike however they are reached.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send

from app.codecs import native, oip, oip_answer, oip_binary
from app.core.context import SCOPE_KEY, RequestContext
from app.core.service import Service
from app.errors import ServingError
from app.rest.body import BodyHeaders, check_content_type, chunks_of, parse_json, read_body
from app.rest.paths import route_path, routes_by_path
from app.rest.responses import refusal

log = logging.getLogger("iabma.errors")  # as app.rest.responses logs the other routes' faults
OCTET_STREAM = frozenset({"application/octet-stream"})
PREDICT = "/predict"
INFER = ("/v2/models/", "/infer")  # around the model's name
_JSON = (b"content-type", b"application/json")
_BINARY = (b"content-type", b"application/octet-stream")


async def predict_answer(
    service: Service, ctx: RequestContext, head: BodyHeaders, chunks: AsyncIterator[bytes]
) -> bytes:
    """``POST /predict``'s answer as JSON bytes, sent only once its record is durable."""
    model = service.runtime.require()
    with service.tracing.span("decode"):
        check_content_type(head.content_type)
        body = parse_json(await read_body(chunks, head, service.settings.max_body_bytes))
        inference, opts = native.decode(body, model, service.settings.max_batch_rows)
    return await service.infer(
        model,
        inference,
        ctx,
        lambda result: native.encode(result, opts, ctx.request_id),
        native.row_parts(opts, ctx.request_id),
    )


async def infer_answer(
    service: Service,
    ctx: RequestContext,
    name: str,
    head: BodyHeaders,
    chunks: AsyncIterator[bytes],
) -> tuple[bytes, int]:
    """OIP infer's answer and the length of its JSON part (shorter: binary tensors follow)."""
    model = oip.served(service.runtime, name)
    declared = head.binary_length
    with service.tracing.span("decode"):
        check_content_type(head.content_type, True, OCTET_STREAM if declared else frozenset())
        raw = await read_body(chunks, head, service.settings.max_body_bytes)
        header, binary = oip_binary.split(raw, declared)
        body = parse_json(header)
        oip_binary.attach(body, binary)
        inference, requested = oip.decode(body, model, service.settings.max_batch_rows)
    answer: tuple[bytes, int] = await service.infer(
        model, inference, ctx, lambda result: oip_answer.encode(result, requested, ctx.request_id)
    )
    return answer


def infer_headers(content: bytes, json_length: int) -> list[tuple[bytes, bytes]]:
    """The answer's content type, and the binary extension's header when tensors follow."""
    if json_length == len(content):
        return [_JSON]
    return [(oip_binary.HEADER.lower().encode(), str(json_length).encode()), _BINARY]


Echo = tuple[bytes, bytes] | None  # the request id's header, unless an outer send adds it
# Sends a data-plane request's answer with ``Echo``; returns its status.
Handler = Callable[[Scope, Receive, Send, Echo], Awaitable[int]]


class DataPlane:
    """Matches the two routes and answers them; the FastAPI routes of the same paths give
    ``scope["route"]``, which metrics, logs and traces label requests by."""

    def __init__(self, service: Service, routes: list[BaseRoute]) -> None:
        self.service = service
        paths = dict(routes_by_path(routes))
        self.predict_route = paths[PREDICT]
        self.infer_route = paths["{}{{name}}{}".format(*INFER)]

    def match(self, scope: Scope) -> Handler | None:
        """The handler of a ``POST`` to either route; None leaves it to FastAPI."""
        if scope["method"] != "POST":
            return None
        path = route_path(scope)
        if path == PREDICT:
            scope["route"] = self.predict_route
            return self._predict
        if path.startswith(INFER[0]) and path.endswith(INFER[1]):
            name = path[len(INFER[0]) : -len(INFER[1])]
            if name and "/" not in name:
                scope["route"] = self.infer_route
                scope["path_params"] = {"name": name}
                return self._infer
        return None

    async def _predict(self, scope: Scope, receive: Receive, send: Send, echo: Echo) -> int:
        ctx: RequestContext = scope[SCOPE_KEY]
        head = BodyHeaders.of(scope["headers"])
        try:
            content = await predict_answer(self.service, ctx, head, chunks_of(receive))
        except (ServingError, ClientDisconnect) as exc:
            return await _refuse(exc, scope, receive, send, echo)
        except Exception as exc:
            return await _fail(exc, scope, receive, send, echo)
        await _send(send, content, [_JSON], echo)
        return 200

    async def _infer(self, scope: Scope, receive: Receive, send: Send, echo: Echo) -> int:
        ctx: RequestContext = scope[SCOPE_KEY]
        head = BodyHeaders.of(scope["headers"])
        name = scope["path_params"]["name"]
        try:
            content, json_length = await infer_answer(
                self.service, ctx, name, head, chunks_of(receive)
            )
        except (ServingError, ClientDisconnect) as exc:
            return await _refuse(exc, scope, receive, send, echo)
        except Exception as exc:
            return await _fail(exc, scope, receive, send, echo)
        await _send(send, content, infer_headers(content, json_length), echo)
        return 200


async def _send(send: Send, content: bytes, headers: list[tuple[bytes, bytes]], echo: Echo) -> None:
    headers.insert(0, (b"content-length", str(len(content)).encode()))
    if echo is not None:
        headers.append(echo)
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _refuse(exc: Exception, scope: Scope, receive: Receive, send: Send, echo: Echo) -> int:
    """The error answer FastAPI's handlers give (app.rest.responses), with the request id."""
    response = refusal(exc, route_path(scope))
    if echo is not None:
        response.raw_headers.append(echo)
    await response(scope, receive, send)
    return response.status_code


async def _fail(exc: Exception, scope: Scope, receive: Receive, send: Send, echo: Echo) -> int:
    """A fault of the server's own (a bug): logged with its traceback once, answered 500
    without one, as FastAPI's handler answers it on the other routes (app.rest.responses).
    Nothing was sent yet: a handler sends its answer only once it is whole."""
    log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
    return await _refuse(exc, scope, receive, send, echo)
