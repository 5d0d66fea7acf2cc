"""The access guard: refuses a request whose key does not open its route's role.

The front middleware (:mod:`app.rest.front`) asks it first, so a refused request is
answered before any body is read. The roles and keys it checks are :mod:`app.core.access`.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Scope

from app.core.access import CONSOLE, KeyRing, presented_key, role_of
from app.errors import Forbidden, Unauthorized
from app.rest.responses import error_response

# Builds the answer to a refused console request from a browser (a login form, still 401).
RefusalPage = Callable[[Exception], ASGIApp]


class AccessGuard:
    """Decides, from the scope alone, whether a request is refused, before any body is read."""

    def __init__(self, ring: KeyRing, console: RefusalPage | None = None) -> None:
        self.ring = ring
        self.console = console

    def refusal(self, scope: Scope) -> ASGIApp | None:
        """The answer to a refused request, or None to serve it."""
        if scope["method"] == "POST" and _cross_site_form(scope):
            exc = Forbidden(
                "a form posted to the console from another site is refused", "header Origin"
            )
            return error_response(exc, scope["path"])
        if scope["method"] != "OPTIONS":
            role = role_of(scope["path"])
            if role is not None and role in self.ring.keys:
                path = scope["path"]
                try:
                    self.ring.check(role, presented_key(scope["headers"], path))
                except (Unauthorized, Forbidden) as exc:
                    if self.console is not None and _wants_html(scope, path):
                        return self.console(exc)
                    return error_response(exc, path)
        return None


def _wants_html(scope: Scope, path: str) -> bool:
    if not (path == CONSOLE or path.startswith(CONSOLE + "/")):
        return False
    accept = dict(scope["headers"]).get(b"accept", b"")
    return b"text/html" in accept


def _cross_site_form(scope: Scope) -> bool:
    """A POST to the console whose ``Origin`` (or, without one, ``Referer``) names another
    host than the request's: SameSite cookies stop another site from using a session, but
    not from signing a browser in with the attacker's key (login CSRF). Clients that send
    neither header (scripts, curl) are not browsers posting forms, and pass."""
    path = scope["path"]
    if not (path == CONSOLE or path.startswith(CONSOLE + "/")):
        return False
    headers = dict(scope["headers"])
    source = headers.get(b"origin") or headers.get(b"referer")
    if not source:
        return False
    host = headers.get(b"host", b"").decode("latin-1").lower()
    netloc = urlsplit(source.decode("latin-1")).netloc.lower()
    return netloc != host
