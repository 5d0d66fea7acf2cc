"""Whether the trail can record now: the writer's failing streak, the cause the database
gave, and the readiness that follows (``IABMA_AUDIT_UNREADY_SECONDS``).

A replica that cannot record can only answer 503, so after commits have failed for the
setting ``/readyz`` says so and a balancer moves traffic away; a probe commit while no
traffic comes brings it back (:meth:`app.audit.write.writer.AuditWriter`).
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("iabma.audit")
FAILURE_LOG_EVERY_S = 10.0
# A probe commit this often while commits fail and nothing else is queued.
PROBE_EVERY_S = 0.5
_CAUSE_CHARS = 400


def cause(exc: BaseException) -> str:
    """What the database said, on one line: ``database or disk is full``, ``connection
    refused``; SQLAlchemy's wrapper class name says nothing of it."""
    orig: BaseException = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    text = "; ".join(lines) if lines else "no message"
    if len(text) > _CAUSE_CHARS:
        text = text[: _CAUSE_CHARS - 3] + "..."
    return f"{type(orig).__name__}: {text}"


class TrailHealth:
    """Written by the writer thread, read by the event loop: plain attribute stores."""

    def __init__(self, unready_seconds: float) -> None:
        self.unready_seconds = unready_seconds
        self.failing_since: float | None = None  # time.monotonic() of the streak's first
        self.last_cause: str | None = None
        self._streak = 0  # groups failed since the last commit
        self._streak_logged = 0.0

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failed(self, exc: BaseException, records: int) -> str:
        """Note and log a failed commit of ``records`` (0 for a probe); return its cause.
        A streak's first failure is logged with its traceback, then one line every
        :data:`FAILURE_LOG_EVERY_S`."""
        reason = self.last_cause = cause(exc)
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        self._streak += 1
        if self._streak == 1:
            log.error("audit commit of %d records failed: %s", records, reason, exc_info=exc)
            self._streak_logged = now
        elif now - self._streak_logged >= FAILURE_LOG_EVERY_S:
            log.error(
                "audit commits still failing: %d groups so far; last: %s", self._streak, reason
            )
            self._streak_logged = now
        return reason

    def succeeded(self) -> None:
        if self._streak:
            log.warning("audit commits succeed again, after %d failed groups", self._streak)
            self._streak, self._streak_logged = 0, 0.0
        self.failing_since = None

    def unready(self, now: float | None = None) -> str | None:
        """Why this replica should get no traffic, or None when it may."""
        since = self.failing_since
        if since is None:
            return None
        failed_for = (time.monotonic() if now is None else now) - since
        if failed_for < self.unready_seconds:
            return None
        return (
            f"audit commits have failed for {failed_for:.1f} s "
            f"(IABMA_AUDIT_UNREADY_SECONDS={self.unready_seconds:g}): {self.last_cause}"
        )
