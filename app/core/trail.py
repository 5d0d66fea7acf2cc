"""The service's side of the audit trail: opening it at start-up (the key, the chain, the
store, the group-commit writer, retention) and the record an answered prediction queues.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.lifecycle import retention
from app.audit.store.chain import chain_key
from app.audit.store.engine import SqliteInUse
from app.audit.store.hashkey import audit_hash_key
from app.audit.store.records import AuditRecord, now_us
from app.audit.store.tables import SchemaMismatch
from app.audit.write.trail_db import AuditStore
from app.audit.write.writer import AuditWriter
from app.core.context import RequestContext
from app.core.plane import InferenceRequest, InferenceResult
from app.errors import StartupRefused
from app.metrics import ServiceMetrics
from app.settings import Settings

log = logging.getLogger("iabma.service")


@dataclass
class Trail:
    hash_key: bytes  # keys the inputs' hashes; empty when the trail keeps no input
    store: AuditStore
    writer: AuditWriter
    retention: Coroutine[Any, Any, None] | None  # the pruning task to run, if retention is on


async def open_trail(
    settings: Settings,
    metrics: ServiceMetrics,
    labels: Callable[[], tuple[str, str]],
    unrecorded: Callable[[], int],
) -> Trail:
    """Prepare the store and start its writer; a trail in use by another server, or of
    another schema, refuses the start."""
    # The key hashes inputs (hash mode) and keys the chain of app.audit.store.chain.
    key = audit_hash_key(settings)
    chain = chain_key(key)
    if not settings.audit_chain:
        log.warning(
            "the audit chain is off (IABMA_AUDIT_CHAIN=false): records written now fail "
            "audit-verify; for benchmarks only"
        )
    store = AuditStore(
        settings.audit_url, settings.audit_timeout_seconds, chain if settings.audit_chain else None
    )
    try:
        await asyncio.to_thread(store.prepare)
    except (SqliteInUse, SchemaMismatch) as exc:
        raise StartupRefused(str(exc)) from None
    writer = AuditWriter(
        store,
        metrics,
        labels,
        settings.audit_batch_max,
        settings.audit_timeout_seconds,
        settings.audit_group_wait_ms / 1000.0,
        unrecorded,
        settings.audit_unready_seconds,
    )
    writer.start()
    days = settings.audit_retention_days
    task = None
    if days is not None:
        url, timeout = settings.audit_url, settings.audit_timeout_seconds
        task = retention.run(url, timeout, chain, days, now_us)
    return Trail(key if settings.audit_payload != "off" else b"", store, writer, task)


def make_record(
    result: InferenceResult,
    request: InferenceRequest,
    ctx: RequestContext,
    input_mode: str,
    hash_key: bytes,
) -> AuditRecord:
    """The audit record of an answered prediction; its row is built on the writer's thread."""
    model, pred = result.model, result.prediction
    if pred.proba is not None:
        answer, experts = pred.proba, pred.expert_proba
    else:
        assert pred.mean is not None and pred.std is not None
        assert pred.interval is not None
        answer = np.column_stack([pred.mean, pred.std, pred.interval])
        experts = pred.expert_means
    spread = model.expert_spread
    if pred.expert_sds is not None:  # the experts' own per-row sds, then the temperature
        spread = np.append(pred.expert_sds, model.manifest.mixture.temperature)
    # Positional, in the fields' order: keywords cost 0.7 us more on every request.
    return AuditRecord(
        ctx.request_id,
        now_us(),  # created_us
        model.name,
        model.version,
        request.route,
        model.task,
        model.experts,
        model.classes if pred.proba is not None else None,
        pred.weights,
        answer,  # prediction
        pred.uncertainty,
        (time.perf_counter() - ctx.started) * 1000.0,  # latency_ms
        input_mode,
        request.instances,
        hash_key,
        experts,  # expert_outputs
        spread,
    )
