"""The gRPC methods: thin adapters over :class:`app.core.service.Service`, like the REST routes.

A domain error becomes a gRPC status through ``errors.GRPC_CODES`` (a bad request is
``INVALID_ARGUMENT``) with the message REST would put in ``{"error": ...}``; anything
unexpected is logged with its traceback and answered ``INTERNAL`` without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from app.codecs import oip
from app.core.context import REQUEST_ID, RequestContext, new_request_id
from app.core.service import Service
from app.errors import ServingError, as_serving_error, grpc_code, oip_body
from app.oip_grpc import codec, wire
from app.oip_grpc.stubs import health_pb2, health_pb2_grpc, pb, pb_grpc

log = logging.getLogger("iabma.grpc")
SERVICE_NAME = "inference.GRPCInferenceService"
WATCH_POLL_S = 1.0  # how soon a health watcher hears of a change (draining, reload)


async def abort(context: grpc.aio.ServicerContext, exc: Exception, method: str) -> None:
    if not isinstance(exc, ServingError):
        log.error("unhandled error in %s", method, exc_info=exc)
    err = as_serving_error(exc)
    await context.abort(grpc.StatusCode[grpc_code(err)], oip_body(err)["error"])


def request_id(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and isinstance(value, str) and REQUEST_ID.match(value):
            return value
    return new_request_id()


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, service: Service, server_version: str) -> None:
        self.service = service
        self.server_version = server_version

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.service.runtime.ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return pb.ServerMetadataResponse(
            name="iabma", version=self.server_version, extensions=list(oip.EXTENSIONS)
        )

    async def ModelReady(self, request: Any, context: Any) -> Any:
        try:
            oip.served(self.service.runtime, request.name, request.version)
        except Exception as exc:
            await abort(context, exc, "ModelReady")
        return pb.ModelReadyResponse(ready=self.service.runtime.ready)

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        try:
            return codec.metadata(oip.served(self.service.runtime, request.name, request.version))
        except Exception as exc:
            await abort(context, exc, "ModelMetadata")

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        ctx = RequestContext(request_id(context), time.perf_counter())
        service = self.service
        try:
            model = oip.served(service.runtime, request.model_name, request.model_version)
            limit = service.settings.max_batch_rows
            fast = wire.fast_request(request, model, limit)
            if fast is None:
                body = codec.request_body(request)
                fast = oip.decode(body, model, limit, "oip_grpc")
            inference, wanted = fast
            answer = await service.infer(
                model, inference, ctx, lambda r: wire.response_bytes(r, wanted, ctx.request_id)
            )
        except Exception as exc:
            await abort(context, exc, "ModelInfer")
        context.set_trailing_metadata((("x-request-id", ctx.request_id),))
        return answer


class HealthServicer(health_pb2_grpc.HealthServicer):
    """``grpc.health.v1``: SERVING while the server is ready (bundle and trail open, not
    draining), for the server as a whole ("") and for the inference service."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.closing = asyncio.Event()

    def status(self, name: str) -> int:
        Status = health_pb2.HealthCheckResponse
        if name not in ("", SERVICE_NAME):
            return Status.SERVICE_UNKNOWN
        return Status.SERVING if self.service.runtime.ready else Status.NOT_SERVING

    async def Check(self, request: Any, context: Any) -> Any:
        status = self.status(request.service)
        if status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        last = None
        while not self.closing.is_set():
            status = self.status(request.service)
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closing.wait(), WATCH_POLL_S)
        # The server is stopping: a watcher hears NOT_SERVING before its stream ends.
        yield health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
