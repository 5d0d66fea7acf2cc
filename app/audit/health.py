"""Whether the trail can record now: the writer's failing streak, the cause the database
gave, and the readiness that follows (``IABMA_AUDIT_UNREADY_SECONDS``).

A replica that cannot record can only answer 503, so after commits have failed for the
setting ``/readyz`` says so and a balancer moves traffic away; a probe commit while no
traffic comes brings it back (:meth:`app.audit.writer.AuditWriter`).
"""

from __future__ import annotations

import time

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

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failed(self, exc: BaseException) -> str:
        """Note a failed commit; return its cause."""
        self.last_cause = cause(exc)
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        return self.last_cause

    def succeeded(self) -> None:
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
