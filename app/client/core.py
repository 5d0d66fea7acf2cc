"""What the sync and async clients share: a call described once, and the plan that runs
it (retries with backoff, ``Retry-After``, one ``X-Request-ID`` per call) and reads the
answer. Why retries are safe: docs/design.md, "The Python client"."""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Generic, TypeVar

import httpx

from app.client.errors import ClientError, ConnectionFailed, InvalidResponse, from_answer

T = TypeVar("T")
log = logging.getLogger("iabma.client")

USER_AGENT = "iabma-client/0.1"
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
