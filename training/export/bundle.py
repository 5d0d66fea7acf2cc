"""Write a fitted estimator as a versioned bundle: ``<store>/<name>/<version>/``.

The version is assembled in a hidden temporary directory: ONNX files first, each checked
against the in-memory model, then ``manifest.json`` with their sha256s, written last. The
directory is renamed into place (atomic on one filesystem) and only then does ``LATEST``
change, by an atomic rename too. A reader never sees half a bundle.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pandas as pd

from app.bundle.loader import sha256_file
from app.bundle.manifest import MANIFEST_FILE, EnsembleEntry, Manifest, MixtureSpec, check_safe_name
from app.bundle.pointer import fsync_dir, publish_latest
from app.bundle.reference import PerformanceReference
from training.errors import ExportError, ParameterError
from training.estimator import IABMAClassifier, IABMARegressor, as_frame
from training.export.ensemble import write_ensemble
from training.export.entries import (
    ensemble_outputs,
    expert_entries,
    gate_entry,
    target_spec,
    training_info,
)
from training.export.served import check_served
from training.onnx_graph import GraphBuilder

GATE_TOL = 1e-5
ENSEMBLE_FILE = "ensemble.onnx"
LIBRARIES = (
    "numpy",
    "scikit-learn",
    "torch",
    "onnx",
    "onnxruntime",
    "skl2onnx",
    "onnxmltools",
    "xgboost",
    "xgboost-cpu",
    "pandas",
)


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            continue
    return out


def new_version(root: Path) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    version, k = stamp, 1
    while (root / version).exists():
        k += 1
        version = f"{stamp}-{k}"
    return version


def write_gate(est: IABMAClassifier | IABMARegressor, path: Path, X_check: pd.DataFrame) -> float:
    g = GraphBuilder("iabma_gate")
    z = est.encoder_.to_onnx(g)
    g.add_output("weights", est.combiner_.to_onnx(g, z))
    path.write_bytes(g.build().SerializeToString())
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    cols = est.columns(X_check)
    (got,) = sess.run(["weights"], {i.name: cols[i.name] for i in sess.get_inputs()})
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - est.weights(X_check))))
    if diff > GATE_TOL:
        raise ExportError(f"the ONNX gate disagrees with the fitted gate by {diff:.3g}")
    return diff


def seal_version(tmp: Path, manifest: Manifest, path: Path, publish: bool) -> None:
    """Write ``manifest.json`` last into ``tmp``, make every file read-only, rename ``tmp``
    to ``path`` (atomic on one filesystem) and, with ``publish``, point ``LATEST`` at it."""
    text = json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=False)
    with (tmp / MANIFEST_FILE).open("w", encoding="utf-8") as fh:
        fh.write(text + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    for f in tmp.rglob("*"):
        if f.is_file():
            f.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    os.rename(tmp, path)
    fsync_dir(path.parent)
    if publish:
        publish_latest(path.parent, path.name)


def export_bundle(
    est: IABMAClassifier | IABMARegressor,
    store: Path | str,
    name: str,
    X_check: Any,
    *,
    target_name: str = "y",
    version: str | None = None,
    metrics: dict[str, dict[str, float]] | None = None,
    expert_metrics: dict[str, dict[str, float]] | None = None,
    training: dict[str, Any] | None = None,
    publish: bool = True,
    performance: PerformanceReference | None = None,
) -> Path:
    """Export ``est`` and return the new version's directory.

    ``X_check`` holds raw rows (e.g. the test split) on which every ONNX graph must agree
    with the in-memory estimator before the bundle is written. ``performance`` is the
    held-out realised NLL the alerts compare with (:func:`training.evaluate.performance_reference`).
    """
    if not hasattr(est, "combiner_"):
        raise ParameterError("est", type(est).__name__, "is not fitted")
    try:
        check_safe_name(name, "name")
    except ValueError as exc:
        raise ParameterError("name", name, str(exc)) from None
    X_check = as_frame(X_check).head(512)
    root = Path(store) / name
    root.mkdir(parents=True, exist_ok=True)
    version = version or new_version(root)
    check_safe_name(version, "version")
    if (root / version).exists():
        raise ParameterError(
            "version", version, f"already exists under {root}; versions are immutable"
        )
    tmp = root / f".tmp-{version}-{os.getpid()}"
    (tmp / "experts").mkdir(parents=True)
    try:
        experts = expert_entries(est, tmp, expert_metrics or {})
        gate_diff = write_gate(est, tmp / "gate.onnx", X_check)
        original = [e.output_units == "original" for e in experts]
        ensemble_diff = write_ensemble(est, tmp / ENSEMBLE_FILE, X_check, original)
        diffs = {
            "gate_parity_max_abs_diff": gate_diff,
            "ensemble_parity_max_abs_diff": ensemble_diff,
        }
        manifest = Manifest(
            name=name,
            version=version,
            task=est._task,
            features=list(est.schema_.features),
            target=target_spec(est, target_name),
            experts=experts,
            gate=gate_entry(est, tmp / "gate.onnx"),
            ensemble=EnsembleEntry(
                file=ENSEMBLE_FILE,
                sha256=sha256_file(tmp / ENSEMBLE_FILE),
                outputs=ensemble_outputs(est._task, experts),
            ),
            mixture=MixtureSpec(temperature=est.mixture_temperature_),
            input_rule=est.schema_.input_rule(),
            training={**training_info(est, diffs), **(training or {})},
            metrics=metrics or {},
            data_fingerprint=est.data_fingerprint_,
            input_reference=getattr(est, "input_reference_", None),
            performance_reference=performance,
            library_versions=library_versions(),
            created_at=datetime.now(UTC),
        )
        seal_version(tmp, manifest, root / version, publish=False)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        # As the server will load it, before LATEST names it (training.export.served).
        check_served(root / version, est.columns(X_check))
    except BaseException:
        shutil.rmtree(root / version, ignore_errors=True)
        raise
    if publish:
        publish_latest(root, version)
    return root / version
