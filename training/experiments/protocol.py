"""One repetition of the paper's protocol, reduced to what every combiner needs.

:func:`prepare_rep` splits the data, balances the training split (classification), builds
the feature bundles and the paper's experts from the training split only, fits them out
of fold through the estimator's own stages and encodes the gate features; a repetition
can be cached on disk while the combiners are varied.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from app.bundle.mixture import clip_proba
from training.datasets import Dataset, load_shared, simulate
from training.estimator import IABMAClassifier, IABMARegressor
from training.evidence import Evidence, classification_evidence, regression_evidence
from training.experiments.paper_experts import feature_bundles, paper_experts
from training.experts.defaults import simulation_experts
from training.splits import holdout_split

CACHE_VERSION = 1


@dataclass(frozen=True)
class RepData:
    """Everything a combiner sees in one repetition, plus what the report needs."""

    dataset: str
    task: str
    rep: int
    seed: int
    expert_names: list[str]
    Z_train: np.ndarray
    Z_test: np.ndarray
    evidence: Evidence  # out-of-fold, training rows
    evidence_in_sample: Evidence  # the refitted experts on their own training rows
    test_outputs: np.ndarray  # (n, m, C) clipped probabilities or (n, m) standardised means
    y_test: np.ndarray  # class codes or standardised target
    y_mean: float = 0.0
    y_scale: float = 1.0
    X_test: pd.DataFrame | None = None  # raw test features (simulation plots)
    region_test: np.ndarray | None = None
    expert_fit_seconds: float = 0.0

    def test_evidence(self) -> Evidence:
        """The test rows as Evidence, so a mixture on them is scored like a training one."""
        if self.task == "classification":
            return classification_evidence(self.test_outputs, self.y_test)
        ev = self.evidence
        assert ev.sigmas is not None
        return regression_evidence(
            self.test_outputs, self.y_test, ev.sigmas, y_low=ev.y_low, y_high=ev.y_high
        )


def balance(data: Dataset, seed: int) -> Dataset:
    """Downsample every class to the minority class's count (training split only)."""
    y = data.y.to_numpy()
    classes, counts = np.unique(y, return_counts=True)
    rng = np.random.default_rng(seed)
    keep = np.sort(
        np.concatenate(
            [rng.choice(np.flatnonzero(y == c), size=counts.min(), replace=False) for c in classes]
        )
    )
    return data.take(keep)


def load(dataset: str, data_dir: Path | None, csv: Dataset | None) -> Dataset:
    if csv is not None:
        return csv
    if dataset == "simulation":
        raise ValueError("the simulation is generated per repetition")
    return load_shared(dataset, data_dir)


def split(
    dataset: str, seed: int, protocol: dict[str, Any], data_dir: Path | None, csv: Dataset | None
) -> tuple[Dataset, Dataset]:
    if dataset == "simulation":  # independent train and test draws, as in the paper
        return simulate(1000, seed), simulate(500, seed + 100_003)
    train, test = holdout_split(load(dataset, data_dir, csv), protocol["test_size"], seed)
    if train.task == "classification" and protocol["balance_classes"]:
        train = balance(train, seed)
    return train, test


def compute_rep(
    dataset: str,
    rep: int,
    seed: int,
    protocol: dict[str, Any],
    data_dir: Path | None = None,
    csv: Dataset | None = None,
) -> RepData:
    train, test = split(dataset, seed, protocol, data_dir, csv)
    task = train.task
    # The experts depend on the prepared training split, so they are set after stage 1.
    est = (IABMAClassifier if task == "classification" else IABMARegressor)(
        [], cv=protocol["cv"], random_state=seed
    )
    data, y_tr = est.prepare(train.X, train.y)
    if dataset == "simulation":
        experts = simulation_experts(protocol.get("simulation_circles") == "paper")
    else:
        bundles = feature_bundles(data.frame, y_tr, est.schema_)
        experts = paper_experts(
            task, bundles, est.schema_, seed, protocol["min_category_frequency"]
        )
    est.set_params(experts=experts).fit_experts(data, y_tr, to_onnx=False)
    est.fit_gate_encoder(data)
    test_data = est.features(test.X)
    test_outputs = est.outputs_of(test_data)
    y_mean, y_scale = (0.0, 1.0) if task == "classification" else (est.y_mean_, est.y_scale_)
    return RepData(
        dataset=dataset,
        task=task,
        rep=rep,
        seed=seed,
        expert_names=est.expert_names_,
        Z_train=est.gate_inputs(data),
        Z_test=est.gate_inputs(test_data),
        evidence=est.evidence_,
        evidence_in_sample=est.evidence_of(est.outputs_of(data), y_tr),
        test_outputs=test_outputs if task == "regression" else clip_proba(test_outputs),
        y_test=est.encode_target(test.y),
        y_mean=y_mean,
        y_scale=y_scale,
        X_test=test.X if dataset == "simulation" else None,
        region_test=test.region,
        expert_fit_seconds=est.expert_fit_seconds_,
    )


def cache_key(dataset: str, seed: int, protocol: dict[str, Any], csv_id: str = "") -> str:
    blob = json.dumps([CACHE_VERSION, dataset, seed, protocol, csv_id], sort_keys=True)
    return f"{dataset}-{seed}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def _save(path: Path, rd: RepData) -> None:
    # Any: numpy types savez_compressed keywords as ArrayLike but reserves allow_pickle.
    arrays: dict[str, Any] = {
        "Z_train": rd.Z_train,
        "Z_test": rd.Z_test,
        "test_outputs": rd.test_outputs,
        "y_test": rd.y_test,
    }
    for prefix, ev in (("ev", rd.evidence), ("evis", rd.evidence_in_sample)):
        for field in ("y", "log_lik", "proba", "means", "sigmas"):
            value = getattr(ev, field)
            if value is not None:
                arrays[f"{prefix}_{field}"] = value
    if rd.region_test is not None:
        arrays["region_test"] = rd.region_test
    if rd.X_test is not None:
        arrays["X_test"] = rd.X_test.to_numpy(dtype=np.float64)
    meta = {
        "dataset": rd.dataset,
        "task": rd.task,
        "rep": rd.rep,
        "seed": rd.seed,
        "expert_names": rd.expert_names,
        "y_mean": rd.y_mean,
        "y_scale": rd.y_scale,
        "expert_fit_seconds": rd.expert_fit_seconds,
        "y_low": rd.evidence.y_low,
        "y_high": rd.evidence.y_high,
        "X_columns": None if rd.X_test is None else list(rd.X_test.columns),
    }
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **arrays)
    tmp.replace(path)


def _load(path: Path) -> RepData:
    with np.load(path, allow_pickle=False) as f:
        a = {k: f[k] for k in f.files}
    meta = json.loads(str(a.pop("meta")))

    def ev(prefix: str) -> Evidence:
        get = lambda k: a.get(f"{prefix}_{k}")  # noqa: E731
        return Evidence(
            meta["task"],
            a[f"{prefix}_y"],
            a[f"{prefix}_log_lik"],
            proba=get("proba"),
            means=get("means"),
            sigmas=get("sigmas"),
            y_low=meta["y_low"],
            y_high=meta["y_high"],
        )

    X_test = None
    if "X_test" in a:
        X_test = pd.DataFrame(a["X_test"], columns=meta["X_columns"])
    return RepData(
        dataset=meta["dataset"],
        task=meta["task"],
        rep=meta["rep"],
        seed=meta["seed"],
        expert_names=meta["expert_names"],
        Z_train=a["Z_train"],
        Z_test=a["Z_test"],
        evidence=ev("ev"),
        evidence_in_sample=ev("evis"),
        test_outputs=a["test_outputs"],
        y_test=a["y_test"],
        y_mean=meta["y_mean"],
        y_scale=meta["y_scale"],
        X_test=X_test,
        region_test=a.get("region_test"),
        expert_fit_seconds=meta["expert_fit_seconds"],
    )


def prepare_rep(
    dataset: str,
    rep: int,
    protocol: dict[str, Any],
    *,
    base_seed: int = 0,
    data_dir: Path | None = None,
    csv: Dataset | None = None,
    csv_id: str = "",
    cache_dir: Path | None = None,
) -> RepData:
    """Repetition ``rep`` (seed ``base_seed + rep``), from the cache when it is there."""
    seed = base_seed + rep
    if cache_dir is None:
        return compute_rep(dataset, rep, seed, protocol, data_dir, csv)
    path = Path(cache_dir) / f"{cache_key(dataset, seed, protocol, csv_id)}.npz"
    if path.is_file():
        return _load(path)
    rd = compute_rep(dataset, rep, seed, protocol, data_dir, csv)
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(path, rd)
    return rd
