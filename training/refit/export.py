"""Write a refitted gate as a new version of its bundle, the expert files copied unchanged.

Only ``gate.onnx``, ``ensemble.onnx``, the manifest and an added expert's file are new:
every kept expert's file is copied byte for byte, so its sha256 in the manifest is the
source version's; a retired one's is left behind. The new graphs are checked against the
refitted gate (and an added expert against its outputs) in memory before the version is
sealed (:func:`~training.export.bundle.seal_version`, atomic), and ``LATEST`` moves only
when ``publish`` says so.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from app.bundle.loader import sha256_file
from app.bundle.manifest import ExpertEntry, GateEntry, MixtureSpec, PriorSpec, WeightHistogram
from app.bundle.mixture import mix_classification
from app.bundle.reference import PerformanceReference
from app.bundle.weight_bins import WEIGHT_EDGES, weight_counts
from training.combiners.base import Combiner
from training.combiners.iabma_gate import IABMAGate
from training.errors import ExportError
from training.export.bundle import GATE_TOL, library_versions, new_version, seal_version
from training.export.ensemble import ENSEMBLE_TOL, ExpertGraph, Target, build_ensemble
from training.onnx_graph import GraphBuilder
from training.refit.gate import GateRefit


def _target(refit: GateRefit) -> Target:
    m = refit.manifest_
    if m.task == "classification":
        return Target("classification", n_classes=len(m.target.classes or []))
    return Target(
        "regression",
        mean=m.target.mean or 0.0,
        scale=m.target.scale or 1.0,
        sigmas=tuple(float(s) for s in refit.sigmas_),
    )


def _run(path: Path, columns: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: columns[i.name] for i in sess.get_inputs()}
    return [np.asarray(a, dtype=np.float64) for a in sess.run(outputs, feeds)]


def _check(what: str, got: np.ndarray, want: np.ndarray, tol: float) -> float:
    diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    if not diff <= tol:
        raise ExportError(f"the refitted {what} disagrees with the fitted gate by {diff:.3g}")
    return diff


def write_gate_graphs(refit: GateRefit, tmp: Path, entries: list[ExpertEntry]) -> dict[str, float]:
    """``gate.onnx`` and ``ensemble.onnx`` for the refitted gate over the experts
    ``entries`` (their files in ``tmp``), each checked against it."""
    m, comb, enc = refit.manifest_, refit.combiner_, refit.encoder_
    g = GraphBuilder("iabma_gate")
    g.add_output("weights", comb.to_onnx(g, enc.to_onnx(g)))
    (tmp / m.gate.file).write_bytes(g.build().SerializeToString())
    cols = refit.columns_check_
    want_w = comb.weights(enc.transform(cols))
    (got_w,) = _run(tmp / m.gate.file, cols, ["weights"])
    gate_diff = _check("gate graph", got_w, want_w, GATE_TOL)
    experts = [
        ExpertGraph(
            e.name,
            onnx.load(str(tmp / e.file)),
            e.output,
            e.output_units == "original",
            e.variance_output,  # the bundle's per-row variances stay served
        )
        for e in entries
    ]
    model = build_ensemble(m.features, enc, comb, experts, _target(refit), refit.temperature_)
    (tmp / m.ensemble.file).write_bytes(model.SerializeToString())
    if m.task == "classification":
        got_w, proba, expert_p = _run(
            tmp / m.ensemble.file, cols, ["weights", "probabilities", "expert_probabilities"]
        )
        want_p = mix_classification(want_w, expert_p, refit.temperature_).proba
        worst = max(_check("ensemble's weights", got_w, want_w, ENSEMBLE_TOL), gate_diff)
        worst = max(worst, _check("ensemble's probabilities", proba, want_p, ENSEMBLE_TOL))
        _check("ensemble's experts", expert_p, refit.outputs_check_, ENSEMBLE_TOL)
    else:
        got_w, means = _run(tmp / m.ensemble.file, cols, ["weights", "expert_means"])
        worst = max(_check("ensemble's weights", got_w, want_w, ENSEMBLE_TOL), gate_diff)
        assert m.target.mean is not None and m.target.scale is not None
        want_m = refit.outputs_check_ * m.target.scale + m.target.mean
        # float32 experts: their means agree to a relative 1e-5 (ENSEMBLE_TOL) of the target
        tol = ENSEMBLE_TOL * max(1.0, float(np.abs(want_m).max()) if want_m.size else 1.0)
        _check("ensemble's expert means", means, want_m, tol)
    return {"gate_parity_max_abs_diff": gate_diff, "ensemble_parity_max_abs_diff": worst}


def prior_spec(comb: Combiner) -> PriorSpec | None:
    """The adaptive prior serving reports: IA-BMA's gate has one, other combiners none."""
    if not isinstance(comb, IABMAGate):
        return None
    return PriorSpec(
        baseline=comb.prior_baseline_.tolist(),
        temperature=comb.prior_temperature_,
        reduction=comb.energy_reduction,
        energy_scale=comb.energy_scale,
    )


def write_experts(refit: GateRefit, source: Path, tmp: Path) -> list[ExpertEntry]:
    """The refitted gate's expert files in ``tmp``: each kept one copied byte for byte from
    the version at ``source``, each added one written from its graph; their entries."""
    old = refit.manifest_
    by_name = {e.name: e for e in old.experts}
    used = {e.file for e in old.experts}
    entries = []
    for j, name in enumerate(refit.expert_names_):
        e = by_name.get(name)
        if e is not None:
            (tmp / e.file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / e.file, tmp / e.file)
            if sha256_file(tmp / e.file) != e.sha256:
                raise ExportError(f"expert file {e.file} changed while it was copied")
            entries.append(e)
            continue
        added = next(a for a in refit.add if a.name == name)
        rel, k = f"experts/{name}.onnx", 1
        while rel in used:  # a kept expert's file may carry the name already
            k += 1
            rel = f"experts/{name}-{k}.onnx"
        used.add(rel)
        (tmp / rel).write_bytes(added.model.SerializeToString())
        regression = old.task == "regression"
        entries.append(
            ExpertEntry(
                name=name,
                file=rel,
                sha256=sha256_file(tmp / rel),
                kind="onnx",
                inputs=added.inputs,
                output=added.output,
                sigma=float(refit.sigmas_[j]) if regression else None,
                output_units="original" if regression else None,
            )
        )
    return entries


def _training(refit: GateRefit) -> dict[str, Any]:
    """The source's training record, its per-expert counts kept to the refit's experts (an
    added ONNX file is used as is: no row of it is tied)."""
    out = dict(refit.manifest_.training)
    tied = out.get("expert_tied_rows")
    if isinstance(tied, dict):
        out["expert_tied_rows"] = {n: tied.get(n, 0) for n in refit.expert_names_}
    return out


def write_refit(
    refit: GateRefit,
    store: Path,
    *,
    provenance: dict[str, Any],
    metrics: dict[str, dict[str, float]],
    data_fingerprint: str,
    publish: bool = False,
    expert_metrics: dict[str, dict[str, float]] | None = None,
    performance: PerformanceReference | None = None,
) -> Path:
    """Write the refitted gate as a new version of the source's bundle; return its path."""
    old = refit.manifest_
    root = Path(store) / old.name
    version = new_version(root)
    source = Path(refit.path)
    tmp = root / f".tmp-{version}-{os.getpid()}"
    (tmp / "experts").mkdir(parents=True)
    try:
        entries = write_experts(refit, source, tmp)
        if expert_metrics is not None:  # on the same held-out rows as the mixture's
            entries = [
                e.model_copy(update={"metrics": expert_metrics.get(e.name, {})}) for e in entries
            ]
        parity = write_gate_graphs(refit, tmp, entries)
        comb = refit.combiner_
        counts = weight_counts(refit.fit_weights_)
        gate = GateEntry(
            file=old.gate.file,
            sha256=sha256_file(tmp / old.gate.file),
            combiner=comb.name,
            inputs=refit.encoder_.schema.inputs,
            params=comb.manifest_params(),
            prior=prior_spec(comb),
            weight_histogram=WeightHistogram(
                edges=list(WEIGHT_EDGES),
                counts={n: c.tolist() for n, c in zip(refit.expert_names_, counts, strict=True)},
                rows=int(counts[0].sum()),
            ),
        )
        manifest = old.model_copy(
            update={
                "version": version,
                "experts": entries,
                "gate": gate,
                "ensemble": old.ensemble.model_copy(
                    update={"sha256": sha256_file(tmp / old.ensemble.file)}
                ),
                "mixture": MixtureSpec(temperature=refit.temperature_),
                "training": {**_training(refit), **parity, "refit": provenance},
                "metrics": metrics,
                "data_fingerprint": data_fingerprint,
                "performance_reference": performance,
                "library_versions": library_versions(),
                "created_at": datetime.now(UTC),
            }
        )
        checked = type(old).model_validate(manifest.model_dump())  # model_copy skips checks
        seal_version(tmp, checked, root / version, publish)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root / version
