"""The access guard: refuses a request whose key does not open its route's role.

The front middleware (:mod:`app.rest.front`) asks it first, so a refused request is
answered before any body is read. It decides on the path routing sees
(:func:`app.rest.paths.route_path`), whatever root path the app is mounted under. The
roles and keys it checks are :mod:`app.core.access`.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Scope

from app.core.access import KeyRing, in_console, presented_key, role_of, unclassified
from app.errors import Forbidden, InvalidPath, StartupRefused, Unauthorized
from app.rest.paths import check_path, route_path, routes_by_path
from app.rest.responses import error_response

# Builds the answer to a refused console request from a browser (a login form, still 401).
RefusalPage = Callable[[Exception, Scope], ASGIApp]


class AccessGuard:
    """Decides, from the scope alone, whether a request is refused, before any body is read."""

    def __init__(self, ring: KeyRing, console: RefusalPage | None = None) -> None:
        self.ring = ring
        self.console = console

    def cover(self, routes: list[BaseRoute]) -> None:
        """Refuse to start with a route whose role :data:`app.core.access.ROUTES` does not
        give: it would be open whatever keys are set."""
        missing = unclassified(path for path, _route in routes_by_path(routes))
        if missing:
            raise StartupRefused(
                f"routes without an access role in app.core.access.ROUTES: {missing}"
            )

    def refusal(self, scope: Scope) -> ASGIApp | None:
        """The answer to a refused request, or None to serve it."""
        path = route_path(scope)
        try:
            check_path(path)
        except InvalidPath as bad:
            return error_response(bad, path)
        if scope["method"] == "POST" and _cross_site_form(scope, path):
            cross = Forbidden(
                "a form posted to the console from another site is refused", "header Origin"
            )
            return error_response(cross, path)
        if scope["method"] != "OPTIONS":
            role = role_of(path)
            if role is not None and role in self.ring.keys:
                try:
                    self.ring.check(role, presented_key(scope["headers"], path))
                except (Unauthorized, Forbidden) as exc:
                    if self.console is not None and _wants_html(scope, path):
                        return self.console(exc, scope)
                    return error_response(exc, path)
        return None


def _wants_html(scope: Scope, path: str) -> bool:
    if not in_console(path):
        return False
    accept = dict(scope["headers"]).get(b"accept", b"")
    return b"text/html" in accept


def _cross_site_form(scope: Scope, path: str) -> bool:
    """A POST to the console whose ``Origin`` (or, without one, ``Referer``) names another
    host than the request's: SameSite cookies stop another site from using a session, but
    not from signing a browser in with the attacker's key (login CSRF). Clients that send
    neither header (scripts, curl) are not browsers posting forms, and pass.

    Host names are compared, not ports, as SameSite compares sites: a proxy commonly passes
    ``Host`` without the port the browser used (nginx's ``$host``), and a form cannot set
    ``Host`` itself."""
    if not in_console(path):
        return False
    headers = dict(scope["headers"])
    source = headers.get(b"origin") or headers.get(b"referer")
    if not source:
        return False
    host = _hostname("//" + headers.get(b"host", b"").decode("latin-1"))
    return host is None or _hostname(source.decode("latin-1")) != host


def _hostname(url: str) -> str | None:
    """The host name of ``url``, lower case; None for "null" or what no browser sends
    ("http://[::1")."""
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None
