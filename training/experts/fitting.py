"""Fitting the experts and collecting the predictions that give the likelihoods (METHOD §3):
``oof`` (cross-fitted, the default), ``holdout`` or ``in_sample``; the fits run through
:func:`training.experts.parallel.run_all` (docs/design.md, "Fitting the experts")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from sklearn.base import clone
from tqdm.auto import tqdm

from training.errors import ParameterError
from training.experts.caps import capped
from training.experts.models import OnnxExpertModel, SklearnExpertModel, build_estimator
from training.experts.parallel import run_all
from training.experts.spec import Expert
from training.features import FeatureSchema
from training.splits import folds, inner_split

LikelihoodSource = Literal["oof", "holdout", "in_sample"]
PARITY_ROWS = 512
SOURCES = ("oof", "holdout", "in_sample")

ExpertModel = SklearnExpertModel | OnnxExpertModel


def expert_schema(expert: Expert, schema: FeatureSchema) -> FeatureSchema:
    """The raw features ``expert`` reads, checked against the training schema."""
    if expert.is_prefit:
        return schema  # narrowed to the graph's inputs once the model is opened
    names = list(expert.features) if expert.features is not None else schema.names
    unknown = [n for n in names if n not in schema.names]
    if unknown or not names:
        raise ParameterError(
            "features", unknown or names, f"of expert {expert.name!r} are not in X"
        )
    return schema.subset(names)


class ExpertSet:
    """Fits ``experts`` and keeps their evidence-giving predictions.

    Attributes (after ``fit``)
    --------------------------
    models_ : list of fitted expert models, in registration order; with ``to_onnx`` (the
        default) each predicts through its ONNX graph, exactly as the bundle will. A
        pre-fitted expert (``Expert.is_prefit``) is used as is, never cloned nor refit.
    likelihood_source_ : ``likelihood_source``, or ``"prefit"`` when every expert is
        pre-fitted: their predictions on every row are then held out already.
    schemas_ : the raw features each expert reads.
    evidence_rows_ : indices of the training rows the predictions below belong to.
    predictions_ : ``(r, m, C)`` probabilities or ``(r, m)`` means on those rows.
    """

    def __init__(
        self,
        experts: Sequence[Expert],
        task: str,
        n_classes: int = 0,
        likelihood_source: LikelihoodSource = "oof",
        cv: int = 5,
        holdout_fraction: float = 0.2,
        random_state: int = 0,
        verbose: bool = False,
        to_onnx: bool = True,
        n_jobs: int = 1,
        scheduler: str | None = None,
        classes: Sequence[Any] | None = None,
    ) -> None:
        self.experts = list(experts)
        self.task = task
        self.n_classes = n_classes
        self.likelihood_source = likelihood_source
        self.cv = cv
        self.holdout_fraction = holdout_fraction
        self.random_state = random_state
        self.verbose = verbose
        self.to_onnx = to_onnx
        self.n_jobs = n_jobs
        self.scheduler = scheduler
        self.classes = classes

    def fit(self, frame: pd.DataFrame, y: np.ndarray, schema: FeatureSchema) -> ExpertSet:
        if self.likelihood_source not in SOURCES:
            raise ParameterError(
                "likelihood_source", self.likelihood_source, f"must be one of {SOURCES}"
            )
        if isinstance(self.cv, bool) or not isinstance(self.cv, int) or self.cv < 2:
            raise ParameterError("cv", self.cv, "must be an integer >= 2")
        n = len(frame)
        prefit = all(e.is_prefit for e in self.experts)
        # Every expert trained elsewhere: its predictions on all rows are held out already,
        # and there is nothing to cross-fit (docs/method.md, "Pre-fitted experts").
        self.likelihood_source_ = "prefit" if prefit else self.likelihood_source
        if prefit:
            splits, rows = [], np.arange(n)
        elif self.likelihood_source == "oof":
            splits = folds(y, self.task, self.cv, self.random_state)
            rows = np.arange(n)
        elif self.likelihood_source == "holdout":
            fit_rows, rows = inner_split(y, self.task, self.holdout_fraction, self.random_state)
            splits = [(fit_rows, rows)]
        else:
            splits, rows = [], np.arange(n)
        self.schemas_: list[FeatureSchema] = []
        self.models_: list[ExpertModel] = []
        # The rows each final expert's ONNX graph is checked on.
        rng = np.random.default_rng(self.random_state)
        check_rows = np.sort(rng.choice(n, size=min(n, PARITY_ROWS), replace=False))
        jobs, owners = self._jobs(frame, y, schema, splits)
        outs: dict[int, np.ndarray] = {}
        finals: dict[int, SklearnExpertModel] = {}
        done = run_all(
            _fit_job, jobs, self.n_jobs, self.scheduler, "fitting experts" if self.verbose else None
        )
        for (j, va), (model, pred) in zip(owners, done, strict=True):
            if j not in outs:
                shape = (n, self.n_classes) if self.task == "classification" else (n,)
                outs[j] = np.zeros(shape)
            if va is not None:
                outs[j][va] = pred
            elif pred is not None:
                outs[j] = pred  # the refit's in-sample predictions
            if model is not None:
                finals[j] = model
        preds = []
        bar = tqdm(self.experts, desc="exporting experts", disable=not self.verbose, leave=False)
        for j, expert in enumerate(bar):
            if expert.is_prefit:
                model = OnnxExpertModel(
                    expert,
                    self.task,
                    self.n_classes,
                    schema,
                    self.classes,
                    frame.iloc[check_rows],
                )
                self.schemas_.append(model.schema)
                self.models_.append(model)
                preds.append(model.predict_raw(frame.iloc[rows]))
                continue
            final = finals[j]
            if self.to_onnx:
                final.freeze(expert.name, frame.iloc[check_rows])
            self.schemas_.append(expert_schema(expert, schema))
            self.models_.append(final)
            preds.append(outs[j][rows])
        self.evidence_rows_ = rows
        self.predictions_ = np.stack(preds, axis=1)
        return self

    def _jobs(
        self,
        frame: pd.DataFrame,
        y: np.ndarray,
        schema: FeatureSchema,
        splits: list[tuple[np.ndarray, np.ndarray]],
    ) -> tuple[list[tuple[Any, ...]], list[tuple[int, np.ndarray | None]]]:
        """Every fit as ``_fit_job`` arguments, and which expert and rows each predicts.

        The K folds x M experts and the M refits are independent, so they run together
        (in parallel if asked) and are put back in order by the caller.
        """
        holdout = self.likelihood_source == "holdout"
        jobs: list[tuple[Any, ...]] = []
        owners: list[tuple[int, np.ndarray | None]] = []
        for j, expert in enumerate(self.experts):
            if expert.is_prefit:
                continue
            sub = expert_schema(expert, schema)
            est = build_estimator(expert, sub, frame)
            args = (sub, self.task, self.n_classes, expert.name, expert.preprocess == "none")
            caps = (expert.max_rows, expert.max_draws, self.random_state)
            for k, (tr, va) in enumerate(splits):
                # Under "holdout" the one fold model is also the served expert.
                keep = holdout and k == len(splits) - 1
                # The whole frame and the rows, not the rows' copies: K copies of a
                # 1M-row frame per expert held at once took gigabytes, and joblib's Dask
                # backend sends one frame once per worker.
                jobs.append((clone(est), frame, y, *args, frame, keep, caps, (tr, va)))
                owners.append((j, va))
            if not holdout:
                in_sample = frame if self.likelihood_source == "in_sample" else None
                jobs.append((clone(est), frame, y, *args, in_sample, True, caps))
                owners.append((j, None))
        return jobs, owners

    def predict_raw(self, frame: pd.DataFrame) -> np.ndarray:
        """``(n, m, C)`` or ``(n, m)`` predictions of the final experts on ``frame``."""
        # Large frames take a while (each graph runs in chunks): show progress for them.
        quiet = not self.verbose or len(frame) < 10_000
        bar = tqdm(self.models_, desc=f"predicting {len(frame)} rows", disable=quiet, leave=False)
        return np.stack([m.predict_raw(frame) for m in bar], axis=1)


def _fit_job(
    est: Any,
    X: pd.DataFrame,
    y: np.ndarray,
    sub: FeatureSchema,
    task: str,
    n_classes: int,
    name: str,
    user_columns: bool,
    X_pred: pd.DataFrame | None,
    keep_model: bool,
    caps: tuple[int | None, int | None, int] = (None, None, 0),
    rows: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> tuple[SklearnExpertModel | None, np.ndarray | None]:
    """Fit one expert on ``(X, y)`` within its ``caps`` (max_rows, max_draws, seed); return
    the model if kept, and its predictions on ``X_pred``. ``rows`` selects the rows of
    ``X`` and of ``X_pred`` (all if None). A module-level function, so joblib can ship it
    to another process."""
    fit_rows, pred_rows = rows
    if fit_rows is not None:
        X, y = X.iloc[fit_rows], y[fit_rows]
    if X_pred is not None and pred_rows is not None:
        X_pred = X_pred.iloc[pred_rows]
    est, X, y = capped(est, X, y, task, *caps)
    model = SklearnExpertModel(est, sub, task, n_classes, user_columns)
    try:
        est.fit(model.inputs_of(X), y)
    except Exception as exc:  # an expert's own failure: say which expert it was
        raise ParameterError(
            "experts", name, f"failed to fit: {type(exc).__name__}: {exc}"
        ) from exc
    pred = None if X_pred is None else model.predict_raw(X_pred)
    return (model if keep_model else None), pred
