"""What the sync and async clients share: building calls, the retry plan, parsing answers.

A call is described once (:class:`Call`) and run by :func:`plan`, a generator that yields
what to do next (send the call, or sleep) and is sent back what happened (a response, or
the transport error). The two clients only drive it: ``Client`` with blocking I/O,
``AsyncClient`` with awaits. So retry policy, errors and parsing exist exactly once.

Retries: 502, 503 and 504 answers, refused or reset connections and timeouts are retried
with exponential backoff and jitter, honouring ``Retry-After``; any other status is
final. Only idempotent calls are retried, and ``POST /predict``, which is pure: every
attempt carries the same ``X-Request-ID``, so an answer lost on the way back shows up in
the audit trail under that id (possibly twice) rather than under an unknown one.
"""

from __future__ import annotations

import email.utils
import gzip
import json
import logging
import os
import random
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import httpx

from app.client import results
from app.client.errors import ClientError, ConnectionFailed, InvalidResponse, from_answer

T = TypeVar("T")
log = logging.getLogger("iabma.client")

USER_AGENT = "iabma-client/0.1"
PARTS = ("prediction", "weights", "experts", "uncertainty")
# Transport errors worth another attempt; a LocalProtocolError or a bad URL is not.
RETRYABLE_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; the k-th retry waits ``backoff * 2**k`` seconds (at most
    ``max_backoff``) scaled by a random factor in ``[1 - jitter, 1]``, or the server's
    ``Retry-After`` when that is longer (capped at ``max_retry_after``)."""

    attempts: int = 4
    backoff: float = 0.2
    max_backoff: float = 5.0
    jitter: float = 0.5
    statuses: frozenset[int] = frozenset({502, 503, 504})
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.backoff < 0 or self.max_backoff < 0 or self.max_retry_after < 0:
            raise ValueError("backoff, max_backoff and max_retry_after must be >= 0")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    def delay(self, retry: int, retry_after: float | None, rand: float) -> float:
        """Seconds before retry number ``retry`` (0-based); ``rand`` is uniform in [0, 1)."""
        wait = min(self.max_backoff, self.backoff * 2**retry) * (1 - self.jitter * rand)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait


NO_RETRY = RetryPolicy(attempts=1)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def new_request_id() -> str:
    """Time-ordered like the server's own ids, which keeps the audit index append-only."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    retryable: bool = True
    request_id: str | None = None

    def http_args(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client.request`` for one attempt."""
        return {
            "method": self.method,
            "url": self.path,
            "params": self.params or None,
            "content": self.body,
            "headers": dict(self.headers),
        }


@dataclass(frozen=True)
class Sleep:
    seconds: float


Outcome = httpx.Response | httpx.TransportError | None
Plan = Generator[Call[T] | Sleep, Outcome, T]


def plan(call: Call[T], policy: RetryPolicy, rng: random.Random) -> Plan[T]:
    """Send ``call`` until it succeeds, fails for good, or runs out of attempts."""
    for attempt in range(1, policy.attempts + 1):
        outcome = yield call
        last = attempt == policy.attempts or not call.retryable
        if isinstance(outcome, httpx.Response):
            status = outcome.status_code
            if 200 <= status < 300:
                return _parse(call, outcome)
            if last or status not in policy.statuses:
                raise from_answer(status, outcome.content, _answer_id(call, outcome), attempt)
            why, retry_after = (
                f"HTTP {status}",
                retry_after_seconds(outcome.headers.get("retry-after")),
            )
        else:
            assert isinstance(outcome, httpx.TransportError)
            if last or not isinstance(outcome, RETRYABLE_ERRORS):
                raise _no_answer(call, outcome, attempt) from outcome
            why, retry_after = type(outcome).__name__, None
        wait = policy.delay(attempt - 1, retry_after, rng.random())
        log.warning(
            "%s %s: %s; retry %d of %d in %.2fs",
            call.method, call.path, why, attempt, policy.attempts - 1, wait,
        )  # fmt: skip
        yield Sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _answer_id(call: Call[Any], response: httpx.Response) -> str | None:
    return response.headers.get("x-request-id") or call.request_id


def _parse(call: Call[T], response: httpx.Response) -> T:
    try:
        body = json.loads(response.content)
    except ValueError:
        raise InvalidResponse(
            f"{call.method} {call.path} answered {response.status_code} with a body that is "
            f"not JSON: {response.content[:120]!r}",
            status=response.status_code,
            code="invalid_response",
            request_id=_answer_id(call, response),
        ) from None
    try:
        return call.parse(body)
    except ClientError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidResponse(
            f"{call.method} {call.path} answered {response.status_code} with a body this client "
            f"cannot read ({type(exc).__name__}: {exc})",
            status=response.status_code,
            code="invalid_response",
            request_id=_answer_id(call, response),
        ) from exc


def _no_answer(call: Call[Any], exc: httpx.TransportError, attempts: int) -> ConnectionFailed:
    timeout = isinstance(exc, httpx.TimeoutException)
    what = "timed out" if timeout else f"failed ({type(exc).__name__}: {exc})"
    hint = ""
    if call.method == "POST" and call.request_id:
        hint = f"; GET /weights?request_id={call.request_id} tells whether an attempt was recorded"
    return ConnectionFailed(
        f"{call.method} {call.path} {what} after {attempts} attempt(s){hint}",
        code="timeout" if timeout else "connection_failed",
        request_id=call.request_id,
        attempts=attempts,
    )


def _text(value: Any, name: str) -> str:
    """A query value; None is the empty value, which /weights reads as missing."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (str, int)):
        return str(value)
    item = getattr(value, "item", None)  # a numpy scalar
    if item is not None:
        return _text(item(), name)
    raise TypeError(f"{name}: cannot send a {type(value).__name__} as a query value: {value!r}")


def _json_default(value: Any) -> Any:
    item = getattr(value, "item", None)
    if item is not None:
        return item()
    raise TypeError(f"cannot send a {type(value).__name__} as JSON: {value!r}")


@dataclass(frozen=True)
class Requests:
    """Builds every call of the HTTP contract; holds the keys and body-encoding choices."""

    api_key: str | None = None
    auditor_key: str | None = None
    gzip: bool = False
    gzip_min_bytes: int = 1024

    def _auth(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _json(self, payload: Any) -> tuple[bytes, dict[str, str]]:
        # NaN is sent as the token NaN so that the service names the field that holds it.
        raw = json.dumps(payload, separators=(",", ":"), default=_json_default).encode()
        headers = {"Content-Type": "application/json"}
        if self.gzip and len(raw) >= self.gzip_min_bytes:
            raw = gzip.compress(raw, compresslevel=5, mtime=0)
            headers["Content-Encoding"] = "gzip"
        return raw, headers

    def predict(
        self,
        rows: Iterable[Mapping[str, Any]],
        parse: Callable[[Any], T],
        *,
        columnar: bool,
        include: Iterable[str] | None,
        request_id: str | None,
    ) -> Call[T]:
        if isinstance(rows, (str, bytes, Mapping)) or hasattr(rows, "columns"):
            raise TypeError(
                f"rows: expected a list of mappings (one per row), got {type(rows).__name__}; "
                "send a DataFrame, Table or mapping of columns with predict_frame"
            )
        payload: dict[str, Any] = {"instances": list(rows)}
        if columnar:
            payload["format"] = "columnar"
        if include is not None:
            parts = [include] if isinstance(include, str) else list(include)
            unknown = [p for p in parts if p not in PARTS]
            if unknown or not parts:
                raise ValueError(f"include: expected parts among {', '.join(PARTS)}, got {parts}")
            payload["include"] = parts
        rid = request_id or new_request_id()
        body, headers = self._json(payload)
        headers.update(self._auth(self.api_key))
        headers["X-Request-ID"] = rid
        return Call("POST", "/predict", parse, body=body, headers=headers, request_id=rid)

    def models(self) -> Call[results.ModelInfo]:
        return Call("GET", "/models", results.model_info, headers=self._auth(self.api_key))

    def _weights(self, params: list[tuple[str, str]], parse: Callable[[Any], T]) -> Call[T]:
        key = self.auditor_key or self.api_key
        return Call("GET", "/weights", parse, params=tuple(params), headers=self._auth(key))

    def record(self, request_id: str) -> Call[results.AuditRecord]:
        return self._weights(
            [("request_id", _text(request_id, "request_id"))], results.audit_record
        )

    def gate(self, features: Mapping[str, Any]) -> Call[results.GateWeights]:
        if not features:
            raise ValueError("features: give every feature of the model, got none")
        params = [(str(k), _text(v, f"features[{k!r}]")) for k, v in features.items()]
        return self._weights(params, results.gate_weights)

    def page(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        expert: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Call[results.RecordPage]:
        given = {"since": since, "until": until, "expert": expert, "limit": limit, "cursor": cursor}
        params = [(k, _text(v, k)) for k, v in given.items() if v is not None]
        return self._weights(params, results.record_page)

    @staticmethod
    def next_page(call: Call[results.RecordPage], page: results.RecordPage) -> Call[Any] | None:
        if not page.next_cursor:
            return None
        params = [(k, v) for k, v in call.params if k != "cursor"]
        return replace(call, params=(*params, ("cursor", page.next_cursor)))
