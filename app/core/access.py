"""Who may call what: the role of every route, and the API, feedback, auditor and metrics
keys.

Each route's role is looked up by its path template in :data:`ROUTES`, matched as routing
matches it (a ``{name}`` is one path segment), on the path routing sees: without the root
path (docs/serving.md, "Access control"). A role without keys is open, but the feedback and
auditor roles fall back to the API keys. Keys come as ``Authorization: Bearer``,
``X-API-Key`` or the console's cookie and are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from urllib.parse import unquote

from app.errors import Forbidden, Unauthorized
from app.settings import Settings


class Role(Enum):
    DATA = "api"
    FEEDBACK = "feedback"
    AUDITOR = "auditor"
    METRICS = "metrics"


CONSOLE = "/audit"
CONSOLE_COOKIE = "iabma_auditor"
# Every route of the app by its template; None is open. The app refuses to start with a
# route missing here (app.rest.access), so a new route is never open by oversight.
ROUTES: dict[str, Role | None] = {
    "/predict": Role.DATA,
    "/models": Role.DATA,
    "/v2": Role.DATA,
    "/v2/models/{name}": Role.DATA,
    "/v2/models/{name}/infer": Role.DATA,
    "/feedback": Role.FEEDBACK,
    "/weights": Role.AUDITOR,
    "/performance": Role.AUDITOR,
    "/drift": Role.AUDITOR,
    "/audit": Role.AUDITOR,
    "/audit/record": Role.AUDITOR,
    "/audit/timeline": Role.AUDITOR,
    "/audit/timeline.json": Role.AUDITOR,
    "/audit/performance": Role.AUDITOR,
    "/audit/probe": Role.AUDITOR,
    "/audit/bundle": Role.AUDITOR,
    "/metrics": Role.METRICS,
    # Probes (KServe's own among them), the documentation, the console's sign-in and its
    # stylesheet and script: no data. /admin/reload checks its own token.
    "/livez": None,
    "/readyz": None,
    "/v2/health/live": None,
    "/v2/health/ready": None,
    "/v2/models/{name}/ready": None,
    "/openapi.json": None,
    "/docs": None,
    "/docs/oauth2-redirect": None,
    "/redoc": None,
    "/audit/login": None,
    "/audit/logout": None,
    "/audit/static/{name}": None,
    "/admin/reload": None,
}
# A path no route takes is a 404 (or a redirect to its twin with or without a trailing
# slash, which is then checked itself); under these prefixes it still needs their role.
_NAMESPACES = (("/audit/", Role.AUDITOR), ("/v2/models/", Role.DATA), ("/models/", Role.DATA))
_PARAM = re.compile(r"\{[^{}]*\}")


def _template_pattern(template: str) -> re.Pattern[str]:
    """A template as routing reads it: each ``{param}`` one non-empty path segment."""
    literals = _PARAM.split(template)
    return re.compile("[^/]+".join(map(re.escape, literals)))


_STATIC = {t: role for t, role in ROUTES.items() if not _PARAM.search(t)}
_PATTERNS = [(_template_pattern(t), role) for t, role in ROUTES.items() if _PARAM.search(t)]


def role_of(path: str) -> Role | None:
    """The role the route path ``path`` needs (a template works too), or ``None`` when open.

    ``path`` is the one routing sees, without the root path (app.rest.paths); it holds no
    control character there, so an exact match is routing's ``^...$``.
    """
    if path in _STATIC:
        return _STATIC[path]
    for pattern, role in _PATTERNS:
        if pattern.fullmatch(path):
            return role
    for prefix, role in _NAMESPACES:
        if path.startswith(prefix):
            return role
    return None


def unclassified(templates: Iterable[str]) -> list[str]:
    """The route templates :data:`ROUTES` does not name."""
    return sorted(set(templates) - set(ROUTES))


def in_console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


@dataclass(frozen=True)
class KeyRing:
    """The sha256 digests of each role's keys; a role absent from ``keys`` is open."""

    keys: dict[Role, tuple[bytes, ...]]

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        api = settings.keys("api_keys")
        given = {
            Role.DATA: api,
            Role.FEEDBACK: settings.keys("feedback_keys") or api,
            Role.AUDITOR: settings.keys("auditor_keys") or api,
            Role.METRICS: settings.keys("metrics_keys"),
        }
        return cls({role: tuple(map(_digest, k)) for role, k in given.items() if k})

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def roles_of(self, key: str) -> set[Role]:
        """Every role ``key`` belongs to; each configured key is compared, match or not."""
        given = _digest(key)
        found = set()
        for role, digests in self.keys.items():
            for digest in digests:
                if hmac.compare_digest(given, digest):
                    found.add(role)
        return found

    def authoriser(self, role: Role) -> Callable[[list[tuple[bytes, bytes]]], None] | None:
        """What checks a request's headers for ``role``'s keys; None when the role is open."""
        if role not in self.keys:
            return None
        return lambda headers: self.check(role, presented_key(headers))

    def check(self, role: Role, key: str | None) -> None:
        """Raise :class:`Unauthorized` or :class:`Forbidden` unless ``key`` opens ``role``."""
        if role not in self.keys:
            return
        if key is None:
            raise Unauthorized(
                f"this route needs a key ({role.value} role): send Authorization: Bearer <key>",
                "header Authorization",
            )
        roles = self.roles_of(key)
        if role in roles:
            return
        if roles:
            held = ", ".join(sorted(r.value for r in roles))
            raise Forbidden(
                f"this key has the {held} role; this route needs the {role.value} role",
                "header Authorization",
            )
        raise Unauthorized("unknown key", "header Authorization")


def presented_key(headers: list[tuple[bytes, bytes]], path: str = "") -> str | None:
    """The key from ``Authorization: Bearer`` or ``X-API-Key``, if either is present; under
    ``/audit``, else from the console's cookie."""
    cookie = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value.strip():
            return value.decode("latin-1").strip()
        elif name == b"cookie":
            cookie = cookie or _console_cookie(value.decode("latin-1"))
    return cookie if in_console(path) else None


def _console_cookie(header: str) -> str | None:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == CONSOLE_COOKIE and value:
            return unquote(value)
    return None
