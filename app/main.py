"""The FastAPI application: ``create_app(settings)`` builds it, the lifespan loads the bundle.

Run it with ``uvicorn 'app.main:create_app' --factory`` or ``iabma serve``. Nothing heavy
happens at import time: settings are read, logging set up and the app assembled when
``create_app`` is called; the bundle is verified and opened, and the audit trail opened,
when the server starts.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from app.audit.check import checkpointer
from app.audit.store.records import now_us
from app.core.access import KeyRing, Role
from app.core.drain import install_drain_hook
from app.core.logs import setup_logging
from app.core.service import Service
from app.core.tracing import UNTRACED, Tracing
from app.core.tracing import from_environment as tracing_from_environment
from app.errors import StartupRefused
from app.rest.access import AccessGuard
from app.rest.front import Front
from app.rest.openapi import install as install_openapi
from app.rest.responses import install_error_handlers
from app.rest.routes import (
    admin,
    console,
    drift,
    feedback,
    health,
    metrics,
    oip,
    predict,
    weights,
)
from app.settings import Settings, load_settings

log = logging.getLogger("iabma.app")
if TYPE_CHECKING:  # grpc is imported only when IABMA_GRPC_PORT is set
    from app.oip_grpc.server import GrpcServer

VERSION = "0.1.0"
GC_THRESHOLDS = (50_000, 50, 100)
DESCRIPTION = """
Input-adaptive Bayesian model averaging: a gate weighs several experts per input; this
service serves the mixture, its weights and its uncertainty, and keeps an audit trail.

**Errors.** Native routes answer `{"error": {"code", "message", "field"}}` (with `details`
listing every fault when a request has several); the message starts with the field, e.g.
`instances[3].age: expected a number or null, got "abc"`. Open Inference Protocol routes
under `/v2` answer `{"error": "..."}`.

**Unknown categories.** A categorical value not seen in training is refused with 422
naming the field, the value and the known categories (`IABMA_UNKNOWN_CATEGORY=reject`, the
default); with `IABMA_UNKNOWN_CATEGORY=missing` it is treated as a missing value.

**Audit cursor.** `GET /weights` pages newest first; `next_cursor` is the base64url text of
`<created_us>.<id>` of the page's last record and is passed back as `?cursor=`.
"""


def tune_gc() -> None:
    """Keep the cyclic collector off what start-up built, and run it less often.

    The bundle, FastAPI and its routes are hundreds of thousands of long-lived objects;
    every full collection walked them all and stalled the event loop for tens of
    milliseconds (p99 at 32 clients: 71 ms, 18 ms with this). A request allocates a few
    hundred short-lived objects, so the young generation is collected less often too.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def start_grpc(service: Service) -> GrpcServer | None:
    """The Open Inference Protocol over gRPC on ``IABMA_GRPC_PORT``; None when it is unset."""
    if service.settings.grpc_port is None:
        return None
    try:
        from app.oip_grpc.server import GrpcServer
    except ImportError as exc:
        raise StartupRefused(f"IABMA_GRPC_PORT is set, but {exc}") from None
    server = GrpcServer(service, VERSION)
    await server.start()
    return server


def _lifespan(service: Service, settings: Settings) -> Callable[[FastAPI], Any]:
    """Start and stop what serving needs: the service, the gRPC port, the checkpoints'
    signer, the drain hook; in reverse on the way out."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started = now_us()  # the audit chains this process starts are the checkpointer's
        await service.start()
        try:
            signer = checkpointer.from_settings(settings, started)
            grpc_server = await start_grpc(service)
        except BaseException:
            await service.stop()
            raise
        signing = (
            asyncio.create_task(signer.run(settings.audit_checkpoint_seconds), name="iabma-sign")
            if signer is not None
            else None
        )
        app.state.build_openapi()  # typed by the bundle just loaded, before the first client asks
        uninstall = install_drain_hook(service.runtime, settings.drain_seconds)
        tune_gc()
        try:
            yield
        finally:
            uninstall()
            if grpc_server is not None:
                await grpc_server.stop()
            await service.stop()
            if signer is not None and signing is not None:
                signing.cancel()
                await asyncio.gather(signing, return_exceptions=True)
                await signer.close()  # the chains' final heads, once the writer is done
            service.tracing.shutdown()

    return lifespan


def create_app(settings: Settings | None = None) -> ServingApp:
    """Build the app; ``settings`` default to the ``IABMA_*`` environment."""
    settings = settings if settings is not None else load_settings()
    setup_logging(settings)
    service = Service(settings, tracing_from_environment())

    app = ServingApp(
        title="IA-BMA serving",
        version=VERSION,
        description=DESCRIPTION,
        lifespan=_lifespan(service, settings),
    )
    app.state.service = service
    install_error_handlers(app)
    ring = KeyRing.from_settings(settings)
    if settings.audit_payload == "full" and Role.AUDITOR not in ring.keys:
        log.warning("IABMA_AUDIT_PAYLOAD=full and no auditor or API keys: /weights is open")
    routers = [predict, weights, feedback, drift, health, admin, oip, console]
    if settings.metrics_port is None:
        routers.append(metrics)
    for module in routers:
        app.include_router(module.router())
    # One middleware: request id, CORS when configured (it answers preflights before keys
    # are asked for), access, the data plane; refused requests get an id, a log line and
    # metrics too.
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    guard = AccessGuard(ring, console=console.refusal_page)
    if service.tracing.exporter is not None:
        # The instrumentation's server span wraps FastAPI's stack: Front goes inside it.
        app.add_middleware(
            Front, service=service, guard=guard, routes=app.routes, cors_origins=origins
        )
        _instrument(app, service.tracing)
    else:
        app.front = Front(partial(FastAPI.__call__, app), service, guard, app.routes, origins)
    app.state.build_openapi = install_openapi(app, service)
    return app


def _instrument(app: FastAPI, tracing: Tracing) -> None:
    """Start the tracing SDK and give ``app`` its server spans."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    tracing.start()
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=tracing.provider, excluded_urls=UNTRACED
    )


class ServingApp(FastAPI):
    """FastAPI with :class:`Front` before its own middleware stack when tracing is off.

    FastAPI's stack (its error, telemetry and body-limit layers) took 8% of a single-row
    prediction's time on the event loop. The data plane needs none of it; every other
    route still passes through all of it, behind Front (docs/design.md, "The request path").
    """

    front: Front | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is None:
            await super().__call__(scope, receive, send)
        else:
            await self.front(scope, receive, send)
