"""What the client raises: one hierarchy, built from the service's error body.

Every error carries ``status`` (``None`` when no answer came back), and the ``code``,
``message`` and ``field`` the service put in ``{"error": {...}}``, so a caller can point at
``instances[3].age`` without parsing text. The class is chosen from the status by the one
table :data:`BY_STATUS`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One fault of a request that had several (the body's ``details``)."""

    code: str
    message: str
    field: str


class ClientError(Exception):
    """Base of everything :mod:`app.client` raises about a call."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        field: str = "",
        details: tuple[FieldError, ...] = (),
        request_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.details = details
        self.request_id = request_id
        self.attempts = attempts

    def __str__(self) -> str:
        where = f" [{self.field}]" if self.field else ""
        status = f"{self.status} " if self.status is not None else ""
        return f"{status}{self.code}{where}: {self.message}"


class ConnectionFailed(ClientError):
    """No answer: the connection was refused or reset, or a timeout passed."""


class InvalidResponse(ClientError):
    """An answer that is not what the contract promises (e.g. a proxy's HTML page)."""


class HTTPError(ClientError):
    """The service (or a proxy in front of it) answered with an error status."""


class BadRequest(HTTPError):
    """400: malformed JSON or an invalid header."""


class AuthenticationError(HTTPError):
    """401: a missing or wrong API key."""


class PermissionDenied(HTTPError):
    """403: a key without the role this route needs (e.g. the auditor's for /weights)."""


class NotFound(HTTPError):
    """404: no such record (``field`` says which parameter), route or model."""


class Conflict(HTTPError):
    """409: e.g. a reload that found a bundle failing verification."""


class PayloadTooLarge(HTTPError):
    """413: too many rows or too many bytes; ``message`` names the limit."""


class UnsupportedMediaType(HTTPError):
    """415: a content type or encoding the service does not read."""


class InvalidInput(HTTPError):
    """422: field-level faults; ``field`` is the first, ``details`` lists them all."""


class ServerError(HTTPError):
    """5xx: the fault is on the service's side."""


class ServiceUnavailable(ServerError):
    """502, 503 or 504 after every retry: loading, draining, or no replica answered."""


BY_STATUS: dict[int, type[HTTPError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: InvalidInput,
    502: ServiceUnavailable,
    503: ServiceUnavailable,
    504: ServiceUnavailable,
}


def error_class(status: int) -> type[HTTPError]:
    if status in BY_STATUS:
        return BY_STATUS[status]
    return ServerError if status >= 500 else HTTPError


def _details(raw: Any) -> tuple[FieldError, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        FieldError(str(d.get("code", "")), str(d.get("message", "")), str(d.get("field", "")))
        for d in raw
        if isinstance(d, Mapping)
    )


def from_answer(
    status: int, content: bytes, request_id: str | None, attempts: int = 1
) -> HTTPError:
    """The error for an answer with an error status, whatever its body holds.

    Native routes send ``{"error": {"code", "message", "field", "details"?}}``; the Open
    Inference Protocol sends ``{"error": "<text>"}``; a proxy may send anything.
    """
    cls = error_class(status)
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    err = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(err, Mapping):
        return cls(
            str(err.get("message", "")),
            status=status,
            code=str(err.get("code", f"http_{status}")),
            field=str(err.get("field") or ""),
            details=_details(err.get("details")),
            request_id=request_id,
            attempts=attempts,
        )
    if isinstance(err, str):
        message = err
    else:
        text = content.decode("utf-8", "replace").strip()
        message = text[:200] if text else f"HTTP {status} with an empty body"
    return cls(
        message, status=status, code=f"http_{status}", request_id=request_id, attempts=attempts
    )
