"""Starting and stopping the gRPC server on the app's own event loop.

The lifespan starts it once the bundle and the audit trail are open, and stops it before
the trail is flushed and closed. Draining (:mod:`app.core.drain`) needs nothing of its own here:
``ServerReady``, ``ModelReady`` and the health service read the same ``draining`` flag as
``/readyz``, and the stop at shutdown lets calls in flight finish for
``IABMA_GRPC_GRACE_SECONDS`` before the audit trail closes, so their records are kept.
"""

from __future__ import annotations

import logging

import grpc

from app.core.access import KeyRing, Role
from app.core.service import Service
from app.errors import StartupRefused
from app.oip_grpc.access import KeyInterceptor
from app.oip_grpc.servicer import HealthServicer, InferenceServicer
from app.oip_grpc.stubs import health_pb2_grpc
from app.oip_grpc.wire import add_inference_service

log = logging.getLogger("iabma.grpc")
# Headroom over the body limit for the message's own framing (names, shapes, parameters).
FRAMING_BYTES = 64 * 1024


class GrpcServer:
    def __init__(self, service: Service, server_version: str) -> None:
        self.service = service
        self.health = HealthServicer(service)
        self.inference = InferenceServicer(service, server_version)
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        settings = self.service.settings
        limit = settings.max_body_bytes + FRAMING_BYTES
        ring = KeyRing.from_settings(settings)
        # An interceptor costs every call a Python hop; without data keys there is
        # nothing for it to check.
        interceptors = [KeyInterceptor(ring)] if Role.DATA in ring.keys else []
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", -1),
            ],
        )
        add_inference_service(self.inference, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        address = f"{settings.grpc_host}:{settings.grpc_port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:
            port, why = 0, str(exc)
        else:
            why = "the address is in use or not local"
        if port == 0:
            raise StartupRefused(
                f"IABMA_GRPC_PORT: cannot listen on {address} ({why}); "
                "choose a free port, or unset it to serve REST only"
            )
        await server.start()
        self.server = server
        log.info("serving the Open Inference Protocol over gRPC on %s", address)

    async def stop(self) -> None:
        if self.server is None:
            return
        self.health.closing.set()
        await self.server.stop(self.service.settings.grpc_grace_seconds)
        self.server = None
