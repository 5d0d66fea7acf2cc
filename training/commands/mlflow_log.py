"""``iabma train --mlflow-log``: the bundle just written, logged back as an MLflow run.

The run (at ``MLFLOW_TRACKING_URI``) holds the bundle's folder as artifacts under
``bundle/`` (its manifest.json among them), the bundle's name, version, task and experts as
parameters, and every test metric as ``<method>.<metric>`` (the experts alone as
``expert.<name>.<metric>``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from app.bundle.loader import open_bundle


def metric_items(
    metrics: dict[str, dict[str, Any]], expert_metrics: dict[str, dict[str, Any]]
) -> dict[str, float]:
    """The finite numeric test metrics, flat, under MLflow-safe names."""
    flat: dict[str, float] = {}
    for prefix, table in (("", metrics), ("expert.", expert_metrics)):
        for method, scores in table.items():
            if not isinstance(scores, dict):
                continue
            for metric, value in scores.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    flat[f"{prefix}{method}.{metric}"] = float(value)
    return flat


def log_bundle(path: Path, run_name: str | None = None) -> tuple[str, str]:
    """Log the bundle at ``path`` as one run; returns (run id, tracking uri)."""
    import mlflow

    manifest = open_bundle(path).manifest
    experts = [e.name for e in manifest.experts]
    with mlflow.start_run(run_name=run_name or f"{manifest.name}-{manifest.version}") as run:
        mlflow.log_params(
            {
                "bundle": manifest.name,
                "version": manifest.version,
                "task": manifest.task,
                "experts": ",".join(experts),
            }
        )
        mlflow.log_metrics(
            metric_items(manifest.metrics, {e.name: e.metrics for e in manifest.experts})
        )
        mlflow.log_artifacts(str(path), artifact_path="bundle")
        return run.info.run_id, str(mlflow.get_tracking_uri())
