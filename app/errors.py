"""Domain errors of the serving layer and the ONE table that maps them to HTTP status.

The logic layer raises these; the HTTP adapters never choose a status themselves. Native
routes answer ``{"error": {"code", "message", "field"}}`` (plus ``details`` when a request
has several faults); Open Inference Protocol routes answer ``{"error": "<message>"}``
and use 400 wherever the native routes would use 400, 415 or 422. Commands' refusals
(:class:`CommandError`) live here too, so training reports its faults without the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from app.bundle.loader import BundleError


@dataclass(frozen=True)
class Fault:
    """One thing wrong with a request: where (``field``), what kind (``code``), and why."""

    code: str
    field: str
    message: str

    def text(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "field": self.field, "message": self.text()}


class ServingError(Exception):
    code: ClassVar[str] = "error"

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.faults = [Fault(self.code, field, message)]

    @property
    def fault(self) -> Fault:
        return self.faults[0]


class InvalidJSON(ServingError):
    code = "invalid_json"


class UnsupportedMediaType(ServingError):
    code = "unsupported_media_type"


class InvalidHeader(ServingError):
    code = "invalid_header"


class InvalidPath(ServingError):
    code = "invalid_path"


class PayloadTooLarge(ServingError):
    code = "payload_too_large"


class TooManyRows(ServingError):
    code = "too_many_rows"


class InvalidInput(ServingError):
    """Field-level faults in a well-formed body or query; all of them are reported."""

    code = "invalid_input"

    def __init__(self, faults: list[Fault]) -> None:
        Exception.__init__(self, "; ".join(f.text() for f in faults))
        self.faults = faults

    @classmethod
    def one(cls, code: str, field: str, message: str) -> InvalidInput:
        return cls([Fault(code, field, message)])


class OutcomeConflict(InvalidInput):
    """Outcomes that differ from the ones stored for their rows; nothing was stored."""

    code = "conflicting_outcome"


class DuplicateRequest(ServingError):
    """The request id names an audited prediction of this model already; nothing was
    recorded for this one."""

    code = "duplicate_request_id"


class NotFound(ServingError):
    code = "not_found"


class Archived(ServingError):
    """The record was moved to a Parquet archive (``iabma audit-archive --delete``)."""

    code = "archived"


class MethodNotAllowed(ServingError):
    code = "method_not_allowed"


class Unauthorized(ServingError):
    code = "unauthorized"


class Forbidden(ServingError):
    code = "forbidden"


class UnsupportedEncoding(ServingError):
    code = "unsupported_encoding"


class InvalidEncoding(ServingError):
    code = "invalid_encoding"


class AdminDisabled(ServingError):
    code = "admin_disabled"


class AuditDisabled(ServingError):
    code = "audit_disabled"


class ReloadFailed(ServingError):
    code = "reload_failed"


class NotReady(ServingError):
    code = "not_ready"


class AuditUnavailable(ServingError):
    code = "audit_unavailable"


class ClientClosedRequest(ServingError):
    """The client went away before its request was read whole: nobody gets the answer,
    but the log and the metrics must not count it as the server's fault."""

    code = "client_closed_request"


class InternalError(ServingError):
    code = "internal"


class StartupRefused(Exception):
    """A setting or resource this server cannot start with; the message says what to do."""


STATUS: dict[type[Exception], int] = {
    InvalidJSON: 400,
    InvalidHeader: 400,
    InvalidPath: 400,
    InvalidEncoding: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Archived: 410,
    AdminDisabled: 404,
    AuditDisabled: 404,
    MethodNotAllowed: 405,
    ReloadFailed: 409,
    OutcomeConflict: 409,
    DuplicateRequest: 409,
    PayloadTooLarge: 413,
    TooManyRows: 413,
    UnsupportedMediaType: 415,
    UnsupportedEncoding: 415,
    InvalidInput: 422,
    ClientClosedRequest: 499,  # nginx's status for it; no client ever reads it
    InternalError: 500,
    NotReady: 503,
    AuditUnavailable: 503,
}
# The Open Inference Protocol reports every malformed request as a plain 400.
OIP_BAD_REQUEST = frozenset({400, 415, 422})


# gRPC has no HTTP status: each status maps to the grpc.StatusCode of that name. A request
# the protocol calls bad (any 400, 413, 415 or 422) is INVALID_ARGUMENT.
GRPC_CODES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    499: "CANCELLED",
    503: "UNAVAILABLE",
}


def grpc_code(exc: BaseException) -> str:
    return GRPC_CODES.get(status_of(exc), "INTERNAL")


def status_of(exc: BaseException) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def as_serving_error(exc: BaseException) -> ServingError:
    if isinstance(exc, ServingError):
        return exc
    if isinstance(exc, BundleError):
        return ReloadFailed(str(exc))
    return InternalError("internal error; the server log has the details")


def native_body(exc: ServingError) -> dict[str, Any]:
    first = exc.fault
    body: dict[str, Any] = {"code": first.code, "message": first.text(), "field": first.field}
    if len(exc.faults) > 1:
        body["details"] = [f.as_json() for f in exc.faults]
    return {"error": body}


def oip_status(status: int) -> int:
    return 400 if status in OIP_BAD_REQUEST else status


def oip_body(exc: ServingError) -> dict[str, str]:
    return {"error": "; ".join(f.text() for f in exc.faults)}


class CommandError(Exception):
    """A bad argument or input file of a command (``iabma ...``, or training's API); the
    message names it, and the CLI shows it as one line with exit code 2."""


class CommandWarning(UserWarning):
    """Something about the user's input that a command changed or would question."""


def option_fault(option: str, value: object, problem: str) -> str:
    """``--name='x' problem``: the option, its value (cut to 200 characters), the fault."""
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:197] + "..."
    return f"{option}={shown} {problem}"
