"""``/livez``, ``/readyz`` and ``/models``: is the process up, can it serve, and what."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.responses import Response

from app.core.service import Service
from app.rest.responses import json_response
from app.rest.routes import router_of
from app.rest.routes.deps import ServiceDep

log = logging.getLogger("iabma.app")
READY = (
    "200 with a bundle loaded; 503 while loading, draining after SIGTERM, or while audit "
    "commits have failed for IABMA_AUDIT_UNREADY_SECONDS (`reason` names the kind of fault; "
    "the database's own message is in the server log)."
)
MODELS = (
    "The served bundle's manifest: experts, their test metrics, the version; and "
    "`rollout`: whether this worker follows LATEST, and the version it last refused."
)


async def livez() -> Response:
    return json_response({"status": "alive"})


# What /readyz may say of a failing trail, by what the database said (searched in lower
# case). Its own words stay in the log: they name the host, the port, the user.
_CAUSES = (
    (("disk is full", "no space left", "disk full"), "the database's disk is full"),
    (("read-only", "readonly"), "the database is read-only"),
    (("locked", "lock timeout", "deadlock"), "the database is locked"),
    (
        ("authentication", "password", "not permitted", "permission denied", "does not exist"),
        "the database refused the login",
    ),
    (("timeout", "timed out"), "the database did not answer in time"),
    (
        ("refused", "could not connect", "connection", "closed", "terminat", "resolve"),
        "the database cannot be reached",
    ),
)


def audit_unready(service: Service) -> str | None:
    """Why the trail makes this replica unready (app.audit.write.health), or None: the
    database's own words, for the log."""
    writer = service.writer
    return writer.health.unready() if writer is not None else None


def public_reason(detail: str, unready_seconds: float) -> str:
    """What a probe may read of ``detail``: how long commits have failed and a kind of
    fault, never the database's text (a probe endpoint is open to anyone)."""
    cause = detail.lower()
    kind = next((k for words, k in _CAUSES if any(w in cause for w in words)), None)
    return (
        f"audit commits have failed for {unready_seconds:g} s or more"
        f" (IABMA_AUDIT_UNREADY_SECONDS): {kind or 'the database refused them'};"
        " the server log has the database's own message"
    )


class Readiness:
    """``/readyz``; it logs the database's words each time a new cause makes it unready,
    so the log holds what the answer leaves out (the trail logs a long streak of failures
    once every few seconds only)."""

    def __init__(self) -> None:
        self.logged: str | None = None

    async def readyz(self, service: ServiceDep) -> Response:
        runtime = service.runtime
        model = runtime.current
        unready = audit_unready(service)
        if unready is not None and not runtime.draining:
            cause = service.writer.health.last_cause if service.writer is not None else None
            if cause != self.logged:
                log.error("not ready: %s", unready)
                self.logged = cause
            reason = public_reason(unready, service.settings.audit_unready_seconds)
            return json_response({"status": "audit_unavailable", "reason": reason}, status=503)
        self.logged = None
        if runtime.ready and model is not None:
            answer = {"status": "ready", "model": model.name, "version": model.version}
            return json_response(answer)
        reason = "draining" if runtime.draining else "loading"
        return json_response({"status": reason}, status=503)


async def models(service: ServiceDep) -> Response:
    summary = service.runtime.require().summary
    return json_response({**summary, "rollout": service.follower.status()})


def router() -> APIRouter:
    readyz = Readiness().readyz
    r = router_of(
        ("GET", "/livez", livez, "200 while the process runs."),
        ("GET", "/readyz", readyz, READY),
        ("GET", "/models", models, MODELS),
    )
    for path, probe in (("/livez", livez), ("/readyz", readyz)):
        # Uptime monitors and some load balancers probe with HEAD; the status is the answer.
        r.add_api_route(path, probe, methods=["HEAD"], response_model=None, include_in_schema=False)
    return r
