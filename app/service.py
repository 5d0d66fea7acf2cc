"""The logic layer behind the routes: predict, audit, reload, and the service's lifecycle.

Routes hand raw JSON and headers to :class:`Service` and get plain data back; all HTTP
status decisions come from :data:`app.errors.STATUS`. A prediction's response body is
serialised before its audit record is committed, so nothing can fail after the commit:
every 2xx has a record, and a failed request has none.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from app.audit.records import AuditRecord, now_us
from app.audit.store import AuditStore
from app.audit.writer import AuditWriter
from app.bundle.columns import Columns, n_rows
from app.bundle.loader import BundleError
from app.errors import (
    AdminDisabled,
    AuditDisabled,
    AuditUnavailable,
    NotReady,
    ReloadFailed,
    Unauthorized,
)
from app.inference import Outcome, RowField, run
from app.inputs import parse_instances
from app.metrics import ServiceMetrics
from app.runtime import LoadedModel, ModelRuntime
from app.settings import Settings

log = logging.getLogger("iabma.service")
# Up to this many rows onnxruntime and the mixture take well under a millisecond, which is
# cheaper inline on the event loop than a hop to a worker thread (TOOLCHAIN.md).
INLINE_ROWS = 64


def dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


class Service:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime = ModelRuntime(settings)
        self.metrics = ServiceMetrics()
        self.store: AuditStore | None = None
        self.writer: AuditWriter | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def labels(self) -> tuple[str, str]:
        model = self.runtime.current
        return (model.name, model.version) if model else (self.settings.model_name, "")

    async def start(self) -> None:
        model = await self.runtime.load()
        log.info(
            "serving %s version %s from %s", model.name, model.version, model.predictor.bundle.path
        )
        if not self.settings.audit_enabled:
            log.warning("the audit trail is disabled (IABMA_AUDIT_ENABLED=false)")
            return
        self.store = AuditStore(self.settings.audit_url, self.settings.audit_timeout_seconds)
        await asyncio.to_thread(self.store.prepare)
        self.writer = AuditWriter(
            self.store,
            self.metrics,
            self.labels,
            self.settings.audit_batch_max,
            self.settings.audit_timeout_seconds,
        )
        self.writer.start()

    async def stop(self) -> None:
        self.runtime.draining = True
        if self.writer is not None:
            await self.writer.close()
        if self.store is not None:
            self.store.close()

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
                f"the audit store is unavailable ({type(exc).__name__})", field="audit"
            ) from None

    # -- predictions -------------------------------------------------------------------------
    async def predict(self, body: Any, request_id: str, started: float) -> bytes:
        model = self.runtime.require()
        columns, rows = parse_instances(body, model.features, self.settings.max_batch_rows)
        outcome = await self.infer(model, columns, lambda i: f"instances[{i}]")
        content = dumps(
            {
                "model": model.name,
                "version": model.version,
                "request_id": request_id,
                "task": model.task,
                "predictions": outcome.items,
            }
        )
        await self.commit(outcome, rows, request_id, "predict", started)
        return content

    async def infer(self, model: LoadedModel, columns: Columns, row_field: RowField) -> Outcome:
        if n_rows(columns) <= INLINE_ROWS:
            return run(model, columns, row_field)
        return await asyncio.to_thread(run, model, columns, row_field)

    async def commit(
        self,
        outcome: Outcome,
        rows: list[dict[str, Any]],
        request_id: str,
        route: str,
        started: float,
    ) -> None:
        """Make the audit record durable, then count the prediction in the metrics."""
        model = outcome.model
        if self.settings.audit_enabled:
            if self.writer is None:
                raise NotReady("the audit trail is not open yet; retry shortly", field="audit")
            record = AuditRecord(
                request_id=request_id,
                created_us=now_us(),
                model=model.name,
                version=model.version,
                route=route,
                task=model.task,
                experts=model.experts,
                weights=outcome.weights,
                items=outcome.items,
                latency_ms=(time.perf_counter() - started) * 1000.0,
                input_mode=self.settings.audit_payload,
                instances=rows,
            )
            await self.writer.write(record)
        labels = (model.name, model.version)
        self.metrics.observe_graphs(labels, outcome.timings)
        self.metrics.observe_weights(labels, model.experts, outcome.weights)
        self.metrics.rows.inc((*labels, route), outcome.n)

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
        self.check_admin(authorization)
        serving = self.runtime.current
        try:
            previous, model = await self.runtime.reload()
        except BundleError as exc:
            self.metrics.reloads.inc((*self.labels(), "failed"))
            still = f"; still serving version {serving.version}" if serving else ""
            raise ReloadFailed(f"{exc}{still}", field="bundle") from None
        self.metrics.reloads.inc((model.name, model.version, "ok"))
        old = previous.version if previous else None
        log.info("reloaded %s: version %s -> %s", model.name, old, model.version)
        return {
            "model": model.name,
            "version": model.version,
            "previous_version": old,
            "changed": old != model.version,
        }
