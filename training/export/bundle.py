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

from app.bundle.drift import WEIGHT_EDGES
from app.bundle.loader import sha256_file
from app.bundle.manifest import (
    MANIFEST_FILE,
    EnsembleEntry,
    ExpertEntry,
    GateEntry,
    Manifest,
    MixtureSpec,
    PriorSpec,
    SourceEntry,
    TargetSpec,
    WeightHistogram,
    check_safe_name,
)
from app.bundle.pointer import fsync_dir, publish_latest
from training.combiners.iabma_gate import IABMAGate
from training.errors import ExportError, ParameterError
from training.estimator import IABMAClassifier, IABMARegressor, as_frame
from training.experts.spec import Expert
from training.export.ensemble import CLASSIFICATION_OUTPUTS, REGRESSION_OUTPUTS, write_ensemble
from training.export.experts import write_expert
from training.export.served import check_served
from training.export.spread import SPREAD_OUTPUT
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


def _target(est: IABMAClassifier | IABMARegressor, target_name: str) -> TargetSpec:
    if isinstance(est, IABMAClassifier):
        classes = est.classes_.tolist()
        # Integer labels stay numbers in the manifest; any other label is text.
        integers = all(isinstance(c, int) for c in classes)
        labels: list[str] | list[int] = classes if integers else [str(c) for c in classes]
        return TargetSpec(name=target_name, classes=labels)
    return TargetSpec(
        name=target_name, mean=est.y_mean_, scale=est.y_scale_, low=est.y_low_, high=est.y_high_
    )


def weight_histogram(est: IABMAClassifier | IABMARegressor) -> WeightHistogram | None:
    """The gate's weights on its training rows, per expert (None for an estimator fitted
    before they were counted)."""
    counts = getattr(est, "gate_weight_counts_", None)
    if counts is None:
        return None
    return WeightHistogram(
        edges=list(WEIGHT_EDGES),
        counts={name: c.tolist() for name, c in zip(est.expert_names_, counts, strict=True)},
        rows=int(counts[0].sum()),
    )


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


def ensemble_outputs(task: str, experts: list[ExpertEntry]) -> list[str]:
    """The fused graph's outputs: ``expert_sds`` too where an expert has its own variance."""
    if task == "classification":
        return list(CLASSIFICATION_OUTPUTS)
    spread = [SPREAD_OUTPUT] if any(e.variance_output for e in experts) else []
    return [*REGRESSION_OUTPUTS, *spread]


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
) -> Path:
    """Export ``est`` and return the new version's directory.

    ``X_check`` holds raw rows (e.g. the test split) on which every ONNX graph must agree
    with the in-memory estimator before the bundle is written.
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
        experts: list[ExpertEntry] = []
        for ename, spec, model in zip(
            est.expert_names_, est.experts, est.experts_.models_, strict=True
        ):
            rel = f"experts/{ename}.onnx"
            output, inputs = write_expert(model, ename, tmp / rel)
            regression = isinstance(est, IABMARegressor)
            units = (
                (spec.output_units if spec.is_prefit else "standardised") if regression else None
            )
            experts.append(
                ExpertEntry(
                    name=ename,
                    file=rel,
                    sha256=sha256_file(tmp / rel),
                    kind=spec.kind,
                    inputs=inputs,
                    output=output,
                    sigma=float(est.sigmas_[len(experts)]) if regression else None,
                    output_units=units,
                    variance_output=spec.variance_output if regression else None,
                    metrics=(expert_metrics or {}).get(ename, {}),
                    prefit=spec.is_prefit,
                    source=source_entry(spec),
                )
            )
        gate_diff = write_gate(est, tmp / "gate.onnx", X_check)
        original = [e.output_units == "original" for e in experts]
        ensemble_diff = write_ensemble(est, tmp / ENSEMBLE_FILE, X_check, original)
        comb = est.combiner_
        prior = None
        if isinstance(comb, IABMAGate):
            prior = PriorSpec(
                baseline=comb.prior_baseline_.tolist(),
                temperature=comb.prior_temperature_,
                reduction=comb.energy_reduction,
                energy_scale=comb.energy_scale,
            )
        info = {
            **fitting_info(est),
            "random_state": est.random_state,
            "gate_fit_seconds": round(est.gate_fit_seconds_, 4),
            "gate_parity_max_abs_diff": gate_diff,
            "ensemble_parity_max_abs_diff": ensemble_diff,
            "n_train_rows": int(est.evidence_.n),
            # Regression experts with their own variance: rows the spread rule changed.
            **(
                {"variance_cleaned_rows": est.variance_counts_}
                if getattr(est, "variance_counts_", None)
                else {}
            ),
            # Rows where a kNN expert's graph picked other, equally distant neighbours.
            "expert_tied_rows": {
                n: int(m.tied_rows_)
                for n, m in zip(est.expert_names_, est.experts_.models_, strict=True)
            },
            **(training or {}),
        }
        manifest = Manifest(
            name=name,
            version=version,
            task=est._task,
            features=list(est.schema_.features),
            target=_target(est, target_name),
            experts=experts,
            gate=GateEntry(
                file="gate.onnx",
                sha256=sha256_file(tmp / "gate.onnx"),
                combiner=comb.name,
                inputs=est.encoder_.schema.inputs,
                params=comb.manifest_params(),
                prior=prior,
                weight_histogram=weight_histogram(est),
            ),
            ensemble=EnsembleEntry(
                file=ENSEMBLE_FILE,
                sha256=sha256_file(tmp / ENSEMBLE_FILE),
                outputs=ensemble_outputs(est._task, experts),
            ),
            mixture=MixtureSpec(temperature=est.mixture_temperature_),
            input_rule=est.schema_.input_rule(),
            training=info,
            metrics=metrics or {},
            data_fingerprint=est.data_fingerprint_,
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


def source_entry(spec: Expert) -> SourceEntry | None:
    """Where a pre-fitted expert came from (its file, if it named one, is hashed)."""
    if not spec.is_prefit:
        return None
    if spec.source is not None:
        return SourceEntry(
            uri=spec.source.uri, format=spec.source.format, sha256=spec.source.sha256
        )
    if spec.kind == "onnx":
        path = Path(spec.model)
        return SourceEntry(uri=str(spec.model), format="onnx", sha256=sha256_file(path))
    return SourceEntry(uri=type(spec.model).__name__, format="object")


def fitting_info(est: IABMAClassifier | IABMARegressor) -> dict[str, Any]:
    """How the experts' likelihoods were obtained: a bundle of pre-fitted experts records
    no cross-fitting it did not do; a mixed one says which expert was fitted how."""
    source = getattr(est.experts_, "likelihood_source_", est.likelihood_source)
    if source == "prefit":
        return {"likelihood_source": "prefit", "cv": None}
    info: dict[str, Any] = {"likelihood_source": est.likelihood_source, "cv": est.cv}
    if any(e.is_prefit for e in est.experts):
        info["expert_fitting"] = {
            e.name: "prefit" if e.is_prefit else est.likelihood_source for e in est.experts
        }
    return info
