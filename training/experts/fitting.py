"""Fitting the experts and collecting the predictions that give the likelihoods (METHOD §3).

- ``"oof"`` (default): K-fold cross-fitted predictions give L; then every expert is
  refitted on all the training rows for serving. This is what stacking does.
- ``"holdout"``: experts fit on part of the rows; L comes from the rest (the calibration
  split), and only those rows train the gate.
- ``"in_sample"``: the paper's literal setting; interpolating learners look perfect.

ONNX-file experts are fixed, so their predictions on the training rows are already
out-of-sample and are used as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from sklearn.base import clone
from tqdm.auto import tqdm

from training.errors import ParameterError
from training.experts.models import OnnxExpertModel, SklearnExpertModel, build_estimator
from training.experts.spec import Expert
from training.features import FeatureSchema
from training.splits import folds, inner_split

LikelihoodSource = Literal["oof", "holdout", "in_sample"]
PARITY_ROWS = 512
SOURCES = ("oof", "holdout", "in_sample")

ExpertModel = SklearnExpertModel | OnnxExpertModel


def expert_schema(expert: Expert, schema: FeatureSchema) -> FeatureSchema:
    """The raw features ``expert`` reads, checked against the training schema."""
    if expert.kind == "onnx":
        return schema  # narrowed to the graph's inputs once the file is opened
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
        default) each predicts through its ONNX graph, exactly as the bundle will.
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

    def fit(self, frame: pd.DataFrame, y: np.ndarray, schema: FeatureSchema) -> ExpertSet:
        if self.likelihood_source not in SOURCES:
            raise ParameterError(
                "likelihood_source", self.likelihood_source, f"must be one of {SOURCES}"
            )
        if isinstance(self.cv, bool) or not isinstance(self.cv, int) or self.cv < 2:
            raise ParameterError("cv", self.cv, "must be an integer >= 2")
        n = len(frame)
        if self.likelihood_source == "oof":
            splits = folds(y, self.task, self.cv, self.random_state)
            rows = np.arange(n)
        elif self.likelihood_source == "holdout":
            fit_rows, rows = inner_split(y, self.task, self.holdout_fraction, self.random_state)
            splits = [(fit_rows, rows)]
        else:
            splits, rows = [], np.arange(n)
        self.schemas_, self.models_, preds = [], [], []
        # The rows each final expert's ONNX graph is checked on.
        rng = np.random.default_rng(self.random_state)
        check_rows = np.sort(rng.choice(n, size=min(n, PARITY_ROWS), replace=False))
        fits_each = len(splits) + (self.likelihood_source != "holdout")
        bar = tqdm(
            total=len(self.experts) * fits_each,
            desc="fitting experts",
            disable=not self.verbose,
            leave=False,
        )
        for expert in self.experts:
            sub = expert_schema(expert, schema)
            if expert.kind == "onnx":
                model = OnnxExpertModel(expert, self.task, self.n_classes, schema)
                self.schemas_.append(model.schema)
                self.models_.append(model)
                preds.append(model.predict_raw(frame.iloc[rows]))
                bar.update(fits_each)
                continue
            est = build_estimator(expert, sub, frame)
            user_columns = expert.preprocess == "none"
            out = np.zeros((n, self.n_classes)) if self.task == "classification" else np.zeros(n)
            for tr, va in splits:
                fold_model = self._fit_one(
                    clone(est), frame.iloc[tr], y[tr], sub, expert.name, user_columns
                )
                out[va] = fold_model.predict_raw(frame.iloc[va])
                bar.update(1)
            if self.likelihood_source == "holdout":
                final = fold_model
            else:
                final = self._fit_one(clone(est), frame, y, sub, expert.name, user_columns)
                bar.update(1)
                if self.likelihood_source == "in_sample":
                    out = final.predict_raw(frame)
            if self.to_onnx:
                final.freeze(expert.name, frame.iloc[check_rows])
            self.schemas_.append(sub)
            self.models_.append(final)
            preds.append(out[rows])
        bar.close()
        self.evidence_rows_ = rows
        self.predictions_ = np.stack(preds, axis=1)
        return self

    def _fit_one(
        self,
        est: Any,
        X: pd.DataFrame,
        y: np.ndarray,
        sub: FeatureSchema,
        name: str,
        user_columns: bool,
    ) -> SklearnExpertModel:
        model = SklearnExpertModel(est, sub, self.task, self.n_classes, user_columns)
        try:
            est.fit(model.inputs_of(X), y)
        except Exception as exc:  # an expert's own failure: say which expert it was
            raise ParameterError(
                "experts", name, f"failed to fit: {type(exc).__name__}: {exc}"
            ) from exc
        return model

    def predict_raw(self, frame: pd.DataFrame) -> np.ndarray:
        """``(n, m, C)`` or ``(n, m)`` predictions of the final experts on ``frame``."""
        return np.stack([m.predict_raw(frame) for m in self.models_], axis=1)
