"""The logic layer behind the routes: predict, audit, reload, and the service's lifecycle.

Routes hand raw JSON and headers to :class:`Service` and get plain data back; all HTTP
status decisions come from :data:`app.errors.STATUS`. A prediction's response body is
serialised before its audit record is committed, so nothing can fail after the commit:
every 2xx has a record, and a failed request has none.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy.exc import SQLAlchemyError

from app.audit.write.health import cause
from app.audit.write.trail_db import AuditStore
from app.audit.write.writer import AuditWriter
from app.bundle.loader import BundleError
from app.bundle.predictor import Prediction
from app.core.access import KeyRing, Role
from app.core.batching import Batcher
from app.core.context import RequestContext
from app.core.follow import LatestFollower
from app.core.graph import PART_ROWS, AnswerParts, GraphThread
from app.core.plane import InferenceRequest, InferenceResult, check_finite
from app.core.runtime import LoadedModel, ModelRuntime
from app.core.shadow import Shadow
from app.core.tracing import Tracing
from app.core.trail import make_record, open_trail
from app.errors import (
    AdminDisabled,
    AuditDisabled,
    AuditUnavailable,
    NotReady,
    ReloadFailed,
    Unauthorized,
)
from app.metrics import ServiceMetrics
from app.metrics.port import MetricsPort
from app.settings import Settings

log = logging.getLogger("iabma.service")
Encoded = TypeVar("Encoded")  # a codec's answer: bytes for REST, a message for gRPC
# Up to this many rows onnxruntime and the mixture take well under a millisecond, which is
# cheaper inline on the event loop than a hop to a worker thread (measured).
INLINE_ROWS = 64
# Routes whose calls arrive one per turn of the event loop (grpc.aio accepts them so),
# never together: their batches wait while calls keep coming (IABMA_GRPC_BATCH_GAP_MS).
PACED_ROUTES = frozenset({"oip_grpc"})


class Service:
    def __init__(self, settings: Settings, tracing: Tracing | None = None) -> None:
        self.settings = settings
        self.tracing = tracing if tracing is not None else Tracing(None)
        self.runtime = ModelRuntime(settings)
        self.metrics = ServiceMetrics(
            settings.drift_window_seconds, settings.drift_min_rows, settings.realised_window_rows
        )
        self.store: AuditStore | None = None
        self.writer: AuditWriter | None = None
        self.in_flight = 0  # requests inside infer(), which the batcher waits for
        self.unrecorded = 0  # of those, the ones yet to queue a record: what a group waits for
        self.batcher = (
            Batcher(
                settings.batch_wait_ms,
                settings.batch_max_rows,
                lambda: self.in_flight,
                lambda model, requests, waited: self.metrics.observe_batch(
                    (model.name, model.version), requests, waited
                ),
                settings.grpc_batch_gap_ms,
                settings.grpc_batch_cap_ms,
            )
            if settings.batching
            else None
        )
        self.graph = GraphThread()
        self.follower = LatestFollower(settings, self.runtime, self.metrics)
        self.shadow = Shadow(settings, self.runtime)
        self.hash_key = b""
        self._tasks: list[asyncio.Task[None]] = []
        self.metrics_port = (
            MetricsPort(
                self.metrics.registry,
                settings.metrics_host,
                settings.metrics_port,
                KeyRing.from_settings(settings).authoriser(Role.METRICS),
            )
            if settings.metrics_port is not None
            else None
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def labels(self) -> tuple[str, str]:
        model = self.runtime.current
        return model.labels if model else (self.settings.model_name, "")

    async def start(self) -> None:
        model = await self.runtime.load()
        log.info(
            "serving %s version %s from %s", model.name, model.version, model.predictor.bundle.path
        )
        histogram = model.manifest.gate.weight_histogram
        self.metrics.serving(
            (model.name, model.version),
            None,
            model.experts,
            histogram,
            model.manifest,
            model.features,
        )
        self._tasks.append(
            asyncio.create_task(self.metrics.run_flusher(self._audit_depth), name="iabma-metrics")
        )
        if self.follower.follows:
            self._tasks.append(asyncio.create_task(self.follower.run(), name="iabma-follow"))
        if self.metrics_port is not None:
            self.metrics_port.start()
        if not self.settings.audit_enabled:
            log.warning("the audit trail is disabled (IABMA_AUDIT_ENABLED=false)")
            return
        trail = await open_trail(self.settings, self.metrics, self.labels, self.unrecorded_working)
        self.hash_key, self.store, self.writer = trail.hash_key, trail.store, trail.writer
        if trail.retention is not None:
            self._tasks.append(asyncio.create_task(trail.retention, name="iabma-audit-retention"))
        self.shadow.start(self.store.engine)
        await self.shadow.check()
        if self.settings.reload_interval_seconds > 0:
            self._tasks.append(asyncio.create_task(self.shadow.run(), name="iabma-shadow"))

    def unrecorded_working(self) -> int:
        """Requests yet to queue a record that are not parked in a batch waiting for the
        others in flight: the ones a group commit may wait for. A parked request waits for
        requests whose answers wait for the commit, so waiting for it would only stall both.
        """
        parked = self.batcher.parked() if self.batcher is not None else 0
        return self.unrecorded - parked

    async def stop(self) -> None:
        self.runtime.draining = True
        self.graph.shutdown()
        self.shadow.stop()
        if self.writer is not None:
            await self.writer.close()
        if self.store is not None:
            self.store.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.metrics_port is not None:
            self.metrics_port.stop()

    def _audit_depth(self) -> None:
        if self.writer is not None:
            self.metrics.audit_depth.set(self.labels(), self.writer.depth)

    def scrape(self, accept: str | None = None) -> tuple[bytes, str]:
        """This worker's numbers flushed, then every worker's as Prometheus exposition."""
        self._audit_depth()
        self.metrics.flush()
        return self.metrics.exposition(accept)

    def require_store(self) -> AuditStore:
        if not self.settings.audit_enabled:
            raise AuditDisabled(
                "the audit trail is disabled on this server (IABMA_AUDIT_ENABLED=false)",
                field="audit",
            )
        if self.store is None:
            raise NotReady("the audit trail is not open yet; retry shortly", field="audit")
        return self.store

    async def read_store(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking audit query on a worker thread; a database fault is a 503."""
        try:
            return await asyncio.to_thread(fn, *args)
        except SQLAlchemyError as exc:
            log.error("audit query failed: %s", exc)
            raise AuditUnavailable(
                f"the audit store is unavailable ({cause(exc)})", field="audit"
            ) from None

    # -- the data plane ----------------------------------------------------------------------
    async def infer(
        self,
        model: LoadedModel,
        request: InferenceRequest,
        ctx: RequestContext,
        encode: Callable[[InferenceResult], Encoded],
        parts: AnswerParts | None = None,
    ) -> Encoded:
        """Run the graph, queue the audit record, encode the answer, await the commit.

        Every 2xx has a durable record; a request refused before the graph ran has none.
        With ``parts``, a large request off the event loop is encoded part by part while
        its graph runs (:meth:`infer_in_parts`); its answer is the same.
        """
        # Requests in here, before or after the graph, are what a batch may wait for.
        self.in_flight += 1
        try:
            if (
                parts is not None
                and request.n > PART_ROWS
                and not self.graph.inline(model, request.n, self.in_flight)
            ):
                return cast(Encoded, await self.infer_in_parts(model, request, ctx, parts))
            result = InferenceResult(model, await self.predict(model, request))
            return await self.recorded(result, request, ctx, lambda: encode(result))
        finally:
            self.in_flight -= 1

    async def recorded(
        self,
        result: InferenceResult,
        request: InferenceRequest,
        ctx: RequestContext,
        encode: Callable[[], Encoded],
    ) -> Encoded:
        """Queue the record, encode the answer while the writer thread waits on the disk
        (without the GIL), await the commit, count the prediction. An encoding fault (a
        server bug, a 500) leaves its record in the trail."""
        committed, taken = self.submit_record(result, request, ctx)
        self.shadow.offer(result, request, ctx)
        if taken is not None and committed is not None:
            # Let the writer build its row first; see app.audit.write.writer.
            await asyncio.wait((taken, committed), return_when=asyncio.FIRST_COMPLETED)
        try:
            content = encode()
        finally:
            if committed is not None:
                with self.tracing.span("audit"):
                    await committed
        self.count(result, request)
        return content

    async def predict(self, model: LoadedModel, request: InferenceRequest) -> Prediction:
        """The request's answer from the graph, checked; meanwhile the request counts among
        those whose audit record is on its way (what a group commit waits for)."""
        self.unrecorded += 1
        try:
            with self.tracing.span("graph"):
                if request.n <= INLINE_ROWS:
                    if self.batcher is not None:
                        paced = request.route in PACED_ROUTES
                        pred = await self.batcher.predict(model, request.columns, request.n, paced)
                    else:
                        pred = model.predictor.predict(request.columns)
                else:
                    pred = await self.graph.predict(model, request, self.in_flight)
            check_finite(model, pred, request.row_field)
            return pred
        finally:
            self.unrecorded -= 1

    async def infer_in_parts(
        self, model: LoadedModel, request: InferenceRequest, ctx: RequestContext, parts: AnswerParts
    ) -> bytes:
        """:meth:`infer` for a large request off the event loop: its rows are encoded part
        by part while its graph runs (:meth:`GraphThread.predict_in_parts`), the last part
        once the record is queued, so that the commit overlaps it. The record and the
        checks are those of the whole request."""
        self.unrecorded += 1
        try:
            with self.tracing.span("graph"):
                pred, encoded, last = await self.graph.predict_in_parts(model, request, parts)
            check_finite(model, pred, request.row_field)
        finally:
            self.unrecorded -= 1

        def answer() -> bytes:
            return parts.join(model, [*encoded, parts.part(InferenceResult(model, last))])

        return await self.recorded(InferenceResult(model, pred), request, ctx, answer)

    def submit_record(
        self, result: InferenceResult, request: InferenceRequest, ctx: RequestContext
    ) -> tuple[asyncio.Future[None] | None, asyncio.Future[None] | None]:
        """Queue the answer's audit record: its commit, and for a large request the moment
        the writer takes it; (None, None) when the trail is off."""
        if not self.settings.audit_enabled:
            return None, None
        if self.writer is None:
            raise NotReady("the audit trail is not open yet; retry shortly", field="audit")
        record = make_record(result, request, ctx, self.settings.audit_payload, self.hash_key)
        if request.n > INLINE_ROWS:
            return self.writer.submit_large(record)
        return self.writer.submit(record), None

    def count(self, result: InferenceResult, request: InferenceRequest) -> None:
        """Count a durable prediction in the metrics."""
        model, pred = result.model, result.prediction
        labels, experts = model.labels, model.experts
        self.metrics.predicted(labels, request.route, experts, pred.weights, pred.seconds)
        self.metrics.inputs.observe(labels, request.columns)

    # -- admin -------------------------------------------------------------------------------
    def check_admin(self, authorization: str | None) -> None:
        token = self.settings.admin_token
        if token is None:
            raise AdminDisabled(
                "admin routes are disabled; set IABMA_ADMIN_TOKEN to enable them", field="admin"
            )
        scheme, _, given = (authorization or "").partition(" ")
        expected = token.get_secret_value().encode("utf-8")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8"), expected
        ):
            raise Unauthorized("missing or wrong bearer token", field="header Authorization")

    async def reload(self, authorization: str | None) -> dict[str, Any]:
        """``/admin/reload``: check ``LATEST`` (or the pinned version) now."""
        self.check_admin(authorization)
        serving = self.runtime.current
        try:
            outcome = await self.follower.check(force=True)
        except BundleError as exc:
            still = f"; still serving version {serving.version}" if serving else ""
            raise ReloadFailed(f"{exc}{still}", field="bundle") from None
        assert outcome is not None
        await self.shadow.check(force=True)
        old = outcome.previous.version if outcome.previous else None
        return {
            "model": outcome.model.name,
            "version": outcome.model.version,
            "previous_version": old,
            "changed": outcome.changed,
        }
