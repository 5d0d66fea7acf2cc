"""``run_quality``: the paper's protocol over repetitions, every method, and the report."""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from training.datasets import Dataset, load_csv
from training.errors import ParameterError
from training.experiments import plots
from training.experiments.config import DATASETS
from training.experiments.methods import (
    MethodOutcome,
    check_config,
    check_methods,
    config_key,
    evidence_source,
    run_method,
    tuning_of,
)
from training.experiments.protocol import RepData, prepare_rep
from training.experiments.report import header_lines, versions
from training.experiments.results import aggregate, render_markdown, write_outputs
from training.experiments.schema import METHODS, METRICS


@dataclass(frozen=True)
class CsvSource:
    """Any table: ``--csv PATH --target COL --task TASK [--drop COL ...]``."""

    path: Path
    target: str
    task: str
    drop: tuple[str, ...] = ()

    def load(self) -> tuple[Dataset, str]:
        """The dataset and a fingerprint of the file and options (the cache key)."""
        data = load_csv(self.path, self.target, self.task, self.drop)
        h = hashlib.sha256(Path(self.path).read_bytes())
        h.update(repr((self.target, self.task, self.drop)).encode())
        return data, h.hexdigest()[:16]


@dataclass
class _Collected:
    """What the repetitions leave behind for the aggregate, the details and the plots."""

    scores: dict[str, list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))
    fit_seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    mean_weights: dict[str, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))
    proba: dict[str, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))
    y_test: list[np.ndarray] = field(default_factory=list)
    selected: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    temperatures: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    reps: list[dict[str, Any]] = field(default_factory=list)
    last: dict[str, MethodOutcome] = field(default_factory=dict)

    def add(self, o: MethodOutcome) -> None:
        self.scores[o.name].append(o.scores)
        self.fit_seconds[o.name].append(o.fit_seconds)
        self.mean_weights[o.name].append(o.weights.mean(axis=0))
        self.temperatures[o.name].append(o.temperature)
        if o.proba is not None:
            self.proba[o.name].append(o.proba)
        if hasattr(o.combiner, "selected_"):
            self.selected[o.name].append(dict(o.combiner.selected_))
        self.last[o.name] = o


def run_quality(
    dataset: str | None,
    reps: int,
    config: dict[str, Any],
    out: Path,
    *,
    csv: CsvSource | None = None,
    methods: list[str] | tuple[str, ...] = METHODS,
    paper_literal: bool = False,
    base_seed: int = 0,
    data_dir: Path | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every method over ``reps`` repetitions and write the report to ``out``.

    Parameters
    ----------
    dataset : str or None
        ``simulation``, ``spambase``, ``credit-g``, ``bike`` or ``california``; None with
        ``csv``.
    reps : int
        Repetitions; repetition ``r`` uses seed ``base_seed + r`` for the split, the
        experts and every combiner.
    config : dict
        From :func:`training.experiments.config.load_config`.
    out : Path
        Receives ``results.json``, ``results.schema.json``, ``details.json``,
        ``results.md`` and the PNG figures.
    csv : CsvSource, optional
        Any other table instead of ``dataset``.
    methods : sequence of str
        A subset of :data:`~training.experiments.schema.METHODS`.
    paper_literal : bool
        Every method learns from in-sample likelihoods, and ``iabma`` uses the
        ``iabma_paper`` settings.
    cache_dir : Path, optional
        Where fitted repetitions are kept (the experts dominate the cost).

    Returns
    -------
    dict
        The content of ``results.json``.
    """
    methods = check_methods(list(methods))
    data, csv_id, name, key, config = _checked(dataset, reps, config, csv, paper_literal)
    t_start = time.perf_counter()
    got, rd = _run_reps(key, name, reps, methods, config, paper_literal, base_seed,
                        (data, csv_id), data_dir, cache_dir, progress)  # fmt: skip

    tuning = {
        m: {**tuning_of(got.last[m].combiner, m), "temperatures": got.temperatures[m]}
        for m in methods
    }
    results = aggregate(name, rd.task, reps, got.scores, got.fit_seconds, tuning, got.selected)
    details = _details(
        name,
        rd,
        reps,
        config,
        methods,
        paper_literal,
        base_seed,
        csv,
        got,
        time.perf_counter() - t_start,
    )
    markdown = render_markdown(
        results, header_lines(rd, reps, config["protocol"], paper_literal, base_seed)
    )
    write_outputs(out, results, details, markdown)
    _plots(out, name, rd, got)
    return results


def _run_reps(
    key: str,
    name: str,
    reps: int,
    methods: list[str],
    config: dict[str, Any],
    paper_literal: bool,
    base_seed: int,
    csv: tuple[Any, str],
    data_dir: Path | None,
    cache_dir: Path | None,
    progress: bool,
) -> tuple[_Collected, RepData]:
    """Every method on every repetition; what they gave, and the last repetition's data."""
    data, csv_id = csv
    got = _Collected()
    bar = tqdm(total=reps * len(methods), desc=name, unit="fit", disable=not progress)
    rd: RepData | None = None
    for rep in range(reps):
        bar.set_postfix_str(f"rep {rep + 1}/{reps}: experts")
        rd = prepare_rep(
            key,
            rep,
            config["protocol"],
            base_seed=base_seed,
            data_dir=data_dir,
            csv=data,
            csv_id=csv_id,
            cache_dir=cache_dir,
        )
        got.y_test.append(rd.y_test)
        for method in methods:
            bar.set_postfix_str(f"rep {rep + 1}/{reps}: {method}")
            got.add(run_method(method, rd, config, paper_literal))
            bar.update()
        got.reps.append(
            {
                "rep": rep,
                "seed": rd.seed,
                "n_train": len(rd.Z_train),
                "n_test": len(rd.Z_test),
                "expert_fit_seconds": rd.expert_fit_seconds,
            }
        )
    bar.close()
    assert rd is not None
    return got, rd


def _checked(
    dataset: str | None,
    reps: int,
    config: dict[str, Any],
    csv: CsvSource | None,
    paper_literal: bool,
) -> tuple[Any, str, str, str, dict[str, Any]]:
    """The checked arguments: the CSV's data and id (if any), the run's name, its config
    key, and the config as the run uses it."""
    if (dataset is None) == (csv is None):
        raise ParameterError("dataset", dataset, "needs exactly one of a dataset name or a CSV")
    if dataset is not None and dataset not in DATASETS:
        raise ParameterError("dataset", dataset, f"must be one of {list(DATASETS)}")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ParameterError("reps", reps, "must be a positive integer")
    data, csv_id, name = None, "", str(dataset)
    if csv is not None:
        data, csv_id = csv.load()
        name = Path(csv.path).stem
    key = "csv" if csv is not None else config_key(name)
    check_config(config, key, paper_literal)
    if paper_literal:
        # The appendix's simulation experts too; the protocol is part of the cache key.
        config = {**config, "protocol": {**config["protocol"], "simulation_circles": "paper"}}
    if config["protocol"].get("simulation_circles") not in ("fitted", "paper"):
        raise ParameterError(
            "protocol.simulation_circles",
            config["protocol"].get("simulation_circles"),
            "must be 'fitted' or 'paper'",
        )
    return data, csv_id, name, key, config


def _details(
    name: str,
    rd: RepData,
    reps: int,
    config: dict[str, Any],
    methods: list[str],
    paper_literal: bool,
    base_seed: int,
    csv: CsvSource | None,
    got: _Collected,
    wall: float,
) -> dict[str, Any]:
    metrics = [*METRICS[rd.task], *(["ece10"] if rd.task == "classification" else [])]
    return {
        "settings": {
            "dataset": name,
            "task": rd.task,
            "reps": reps,
            "base_seed": base_seed,
            "paper_literal": paper_literal,
            "methods": methods,
            "evidence": {m: evidence_source(m, paper_literal) for m in methods},
            "csv": None
            if csv is None
            else {
                "path": str(csv.path),
                "target": csv.target,
                "task": csv.task,
                "drop": list(csv.drop),
            },
            "config": config,
        },
        "experts": rd.expert_names,
        "reps": got.reps,
        "per_rep": {
            m: [
                {k: s[k] for k in metrics} | {"fit_seconds": t}
                for s, t in zip(got.scores[m], got.fit_seconds[m], strict=True)
            ]
            for m in methods
        },
        "mean_weights": {m: np.mean(got.mean_weights[m], axis=0).tolist() for m in methods},
        "temperature": {m: got.last[m].temperature for m in methods},
        "selected": dict(got.selected),
        "params": {m: got.last[m].combiner.manifest_params() for m in methods},
        "wall_seconds": wall,
        "versions": versions(),
    }


def _plots(out: Path, name: str, rd: RepData, got: _Collected) -> list[Path]:
    written = []
    if rd.task == "classification":
        y = np.concatenate(got.y_test)
        proba = {m: np.concatenate(p) for m, p in got.proba.items()}
        written.append(
            plots.reliability_diagrams(
                proba,
                y,
                out / "reliability.png",
                f"{name}: reliability, test predictions of all repetitions ({len(y)} rows)",
            )
        )
    weights = {m: np.mean(w, axis=0) for m, w in got.mean_weights.items()}
    written.append(
        plots.mean_weights(
            weights, rd.expert_names, out / "weights.png", f"{name}: mean weight per expert"
        )
    )
    if rd.X_test is not None and rd.X_test.shape[1] == 2:
        written.append(
            plots.weight_fields(
                {m: o.combiner for m, o in got.last.items()},
                rd.X_test.to_numpy(np.float64),
                rd.Z_test,
                rd.y_test,
                rd.region_test,
                rd.expert_names,
                out / "weight_fields.png",
                f"{name}: weight fields (repetition {rd.rep}, seed {rd.seed})",
            )
        )
    return written
