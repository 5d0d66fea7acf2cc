"""Who may call what: the roles of the routes, and the API, feedback, auditor and metrics
keys.

A role without keys is open, but the feedback and auditor roles fall back to the API keys.
Keys come
as ``Authorization: Bearer``, ``X-API-Key`` or the console's cookie and are compared in
constant time (docs/design.md, "Access").
"""

from __future__ import annotations

import hashlib
import hmac
import re
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


# The OIP model's readiness answers probes (KServe's own), like the health routes.
_OIP_READY = re.compile(r"^/v2/models/[^/]+(?:/versions/[^/]+)?/ready$")
_OIP_MODEL = re.compile(r"^/v2/models/[^/]+(?:/versions/[^/]+)?(?:/infer)?$")
CONSOLE = "/audit"
CONSOLE_COOKIE = "iabma_auditor"
# The console's login form, its logout and its stylesheet and script hold no audit data.
_CONSOLE_OPEN = ("/audit/login", "/audit/logout")


def role_of(path: str) -> Role | None:
    """The role a path needs, or ``None`` for open paths (health, docs, admin's own token)."""
    if path == "/predict" or path == "/models" or path.startswith("/models/"):
        return Role.DATA
    if path == "/v2" or (_OIP_MODEL.match(path) and not _OIP_READY.match(path)):
        return Role.DATA
    if path == "/feedback":
        return Role.FEEDBACK
    if path in _CONSOLE_OPEN or path.startswith("/audit/static/"):
        return None
    if path in ("/weights", "/performance") or path == CONSOLE or path.startswith(CONSOLE + "/"):
        return Role.AUDITOR
    if path == "/metrics":
        return Role.METRICS
    return None


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
    in_console = path == CONSOLE or path.startswith(CONSOLE + "/")
    return cookie if in_console else None


def _console_cookie(header: str) -> str | None:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == CONSOLE_COOKIE and value:
            return unquote(value)
    return None
