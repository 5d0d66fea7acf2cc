"""The manifest's parts that describe a fitted estimator: its experts' entries (each
expert's graph written on the way), the gate's entry, the target, and the training info."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.bundle.loader import sha256_file
from app.bundle.manifest import (
    ExpertEntry,
    GateEntry,
    PriorSpec,
    SourceEntry,
    TargetSpec,
    WeightHistogram,
)
from app.bundle.weight_bins import WEIGHT_EDGES
from training.combiners.iabma_gate import IABMAGate
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.spec import Expert
from training.export.ensemble import CLASSIFICATION_OUTPUTS, REGRESSION_OUTPUTS
from training.export.experts import write_expert
from training.export.spread import SPREAD_OUTPUT

Estimator = IABMAClassifier | IABMARegressor


def expert_entries(
    est: Estimator, tmp: Path, expert_metrics: dict[str, dict[str, float]]
) -> list[ExpertEntry]:
    """Write each expert's graph under ``tmp/experts/`` and describe it."""
    regression = isinstance(est, IABMARegressor)
    experts: list[ExpertEntry] = []
    for j, (ename, spec, model) in enumerate(
        zip(est.expert_names_, est.experts, est.experts_.models_, strict=True)
    ):
        rel = f"experts/{ename}.onnx"
        output, inputs = write_expert(model, ename, tmp / rel)
        units = (spec.output_units if spec.is_prefit else "standardised") if regression else None
        experts.append(
            ExpertEntry(
                name=ename,
                file=rel,
                sha256=sha256_file(tmp / rel),
                kind=spec.kind,
                inputs=inputs,
                output=output,
                sigma=float(est.sigmas_[j]) if regression else None,
                output_units=units,
                variance_output=spec.variance_output if regression else None,
                metrics=expert_metrics.get(ename, {}),
                prefit=spec.is_prefit,
                source=source_entry(spec),
            )
        )
    return experts


def gate_entry(est: Estimator, path: Path) -> GateEntry:
    """The gate written at ``path``, its combiner and what its prior was."""
    comb = est.combiner_
    prior = None
    if isinstance(comb, IABMAGate):
        prior = PriorSpec(
            baseline=comb.prior_baseline_.tolist(),
            temperature=comb.prior_temperature_,
            reduction=comb.energy_reduction,
            energy_scale=comb.energy_scale,
        )
    return GateEntry(
        file=path.name,
        sha256=sha256_file(path),
        combiner=comb.name,
        inputs=est.encoder_.schema.inputs,
        params=comb.manifest_params(),
        prior=prior,
        weight_histogram=weight_histogram(est),
    )


def training_info(est: Estimator, diffs: dict[str, float]) -> dict[str, Any]:
    """How the estimator was fitted, and how closely its graphs agree with it."""
    return {
        **fitting_info(est),
        "random_state": est.random_state,
        "gate_fit_seconds": round(est.gate_fit_seconds_, 4),
        **diffs,
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
    }


def target_spec(est: IABMAClassifier | IABMARegressor, target_name: str) -> TargetSpec:
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


def ensemble_outputs(task: str, experts: list[ExpertEntry]) -> list[str]:
    """The fused graph's outputs: ``expert_sds`` too where an expert has its own variance."""
    if task == "classification":
        return list(CLASSIFICATION_OUTPUTS)
    spread = [SPREAD_OUTPUT] if any(e.variance_output for e in experts) else []
    return [*REGRESSION_OUTPUTS, *spread]


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
