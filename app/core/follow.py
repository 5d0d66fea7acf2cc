"""Every worker follows its bundle's ``LATEST`` by itself: the fleet's rollout and rollback.

Each worker stats the pointer every ``IABMA_RELOAD_INTERVAL_SECONDS``, verifies a new
version on a thread while the old one serves, swaps it atomically, and refuses (once per
pointer move) a version that fails (docs/design.md, "Rollout").
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

from app.bundle.loader import BundleError
from app.bundle.manifest import LATEST_FILE
from app.core.runtime import LoadedModel, ModelRuntime
from app.metrics import ServiceMetrics
from app.settings import Settings

log = logging.getLogger("iabma.follow")


@dataclass(frozen=True)
class Refusal:
    version: str
    error: str

    def as_json(self) -> dict[str, str]:
        return {"version": self.version, "error": self.error}


@dataclass(frozen=True)
class Outcome:
    previous: LoadedModel | None
    model: LoadedModel

    @property
    def changed(self) -> bool:
        return self.previous is None or self.previous.version != self.model.version


class LatestFollower:
    """Checks the pointer on demand (``check``) and, unless pinned, on a timer (``run``)."""

    def __init__(self, settings: Settings, runtime: ModelRuntime, metrics: ServiceMetrics):
        self.settings = settings
        self.runtime = runtime
        self.metrics = metrics
        self.pointer = settings.store / settings.model_name / LATEST_FILE
        self.refused: Refusal | None = None
        self._seen: tuple[int, int, int] | None = self._stat()

    @property
    def follows(self) -> bool:
        return self.settings.model_version is None and self.settings.reload_interval_seconds > 0

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.pointer)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _named(self) -> str | None:
        try:
            return self.pointer.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    async def check(self, force: bool = False) -> Outcome | None:
        """Load what the pointer names if it moved (or always, with ``force``).

        Returns the swap, or ``None`` when nothing changed; raises ``BundleError`` for a
        refused version, leaving the served one in place.
        """
        key = self._stat()
        if not force:
            if key == self._seen:
                return None
            self._seen = key
            named, current = self._named(), self.runtime.current
            if named is None or (current is not None and named == current.version):
                return None
            if self.refused is not None and self.refused.version == named:
                return None
        self._seen = key
        serving = self.runtime.current
        try:
            previous, model = await self.runtime.reload()
        except BundleError as exc:
            self._refuse(exc, serving)
            raise
        self.refused = None
        labels = (model.name, model.version)
        self.metrics.reloads.inc((*labels, "ok"))
        before = (previous.name, previous.version) if previous else None
        histogram = model.manifest.gate.weight_histogram
        self.metrics.serving(
            labels, before, model.experts, histogram, model.manifest, model.features
        )
        outcome = Outcome(previous, model)
        if outcome.changed:
            old = previous.version if previous else None
            log.info("now serving %s version %s (was %s)", model.name, model.version, old)
        return outcome

    def _refuse(self, exc: BundleError, serving: LoadedModel | None) -> None:
        version = self._named() or "?"
        self.refused = Refusal(version, str(exc))
        labels = (self.settings.model_name, version)
        self.metrics.reloads.inc((*labels, "refused"))
        self.metrics.refused.set(labels, 1)
        still = serving.version if serving else "nothing"
        log.error("refused version %s: %s; still serving %s", version, exc, still)

    async def run(self) -> None:
        """Check every interval until cancelled; a refusal or a fault never stops it."""
        while True:
            await asyncio.sleep(self.settings.reload_interval_seconds)
            try:
                await self.check()
            except BundleError:
                pass  # logged and recorded by _refuse
            except Exception:
                log.exception("checking %s failed", self.pointer)

    def status(self) -> dict[str, Any]:
        return {
            "follows_latest": self.follows,
            "interval_seconds": self.settings.reload_interval_seconds if self.follows else None,
            "refused": self.refused.as_json() if self.refused else None,
        }
