"""The per-request context the middleware makes and the routes receive as a dependency."""

from __future__ import annotations

from dataclasses import dataclass

# The ASGI scope key under which the middleware leaves the context for the routes.
SCOPE_KEY = "iabma.context"


@dataclass(frozen=True, slots=True)
class RequestContext:
    request_id: str  # the client's X-Request-ID, or a fresh one; echoed and audited
    started: float  # time.perf_counter() when the request arrived
