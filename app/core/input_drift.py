"""``GET /drift``: each feature's served values over the drift window (every live worker)
against the bundle's training rows, and whether the gate's weight drift can move at all.

The counts come from the metrics' shared window (:mod:`app.metrics.inputs`); a bundle
exported before it kept its training inputs' bins answers ``available: false`` with the
reason, never an error.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from app.bundle.weight_bins import gate_constant
from app.contract.drift import DriftReport, FeatureDriftEntry
from app.core.service import Service
from app.metrics.inputs import WINDOW, FeatureDrift

NO_REFERENCE = (
    "this bundle keeps no bins of its training inputs (exported before they were kept); "
    "retrain it to see input drift"
)


def entry(d: FeatureDrift) -> FeatureDriftEntry:
    """The route's view of one feature's window."""
    served = [int(v) for v in d.served]
    out_of_range = served[0] + served[-2] if d.kind == "numeric" else 0
    unseen = served[-2] if d.kind == "categorical" else 0
    return FeatureDriftEntry(
        feature=d.feature, kind=d.kind, rows=d.rows, psi=d.psi, out_of_range=out_of_range,
        unseen=unseen, missing=served[-1], bins=d.bins, served=d.served, training=d.training,
    )  # fmt: skip


def window_drift(service: Service) -> dict[Any, list[FeatureDrift]]:
    """Every watched version's features, from the window counts of all live workers."""
    metrics = service.metrics
    merged = next((f for f in metrics.drift.inner.collect() if f.name == WINDOW), None)
    return metrics.inputs.drift(merged, service.settings.drift_min_rows)


async def drift(service: Service) -> dict[str, Any]:
    model = service.runtime.require()
    found = await asyncio.to_thread(window_drift, service)
    features = [entry(d) for d in found.get(model.labels, [])]
    available = model.manifest.input_reference is not None
    report = DriftReport(
        model=model.name,
        version=model.version,
        available=available,
        reason=None if available else NO_REFERENCE,
        window_seconds=service.settings.drift_window_seconds,
        min_rows=service.settings.drift_min_rows,
        gate_constant=gate_constant(model.manifest),
        features=features,
    )
    return asdict(report)
