"""What the performance page shows of input drift and of a gate that cannot drift: each
feature's PSI over the window against training (the figures of ``GET /drift``), and
whether the served gate is a pool, whose weight drift is then meaningless."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from app.bundle.weight_bins import gate_constant
from app.console import charts
from app.core.input_drift import NO_REFERENCE, entry, window_drift
from app.core.runtime import LoadedModel
from app.core.service import Service

THRESHOLDS = [(0.1, "0.1 moderate"), (0.25, "0.25 major")]


async def console_drift(service: Service, model: LoadedModel) -> dict[str, Any]:
    """The page's input-drift section and the constant gate's flag."""
    found = await asyncio.to_thread(window_drift, service)
    features = [asdict(entry(d)) for d in found.get(model.labels, [])]
    available = model.manifest.input_reference is not None
    return {
        "gate_constant": gate_constant(model.manifest),
        "input_drift": features,
        "input_drift_reason": None if available else NO_REFERENCE,
        "input_drift_chart": charts.bar_chart(
            {f["feature"]: f["psi"] for f in features}, THRESHOLDS
        ),
    }
