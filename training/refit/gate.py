"""A bundle's gate refitted on outcome rows, and compared with the served gate.

The experts are not refitted: their likelihoods come from the bundle's own graphs, run
through its served ``ensemble.onnx`` (which holds each expert graph unchanged), so each
row's evidence is what the experts said when it was served. The gate is the bundle's own
combiner with the settings its manifest records, unless the caller names others
(:mod:`~training.refit.settings`), fitted on every row but the latest requests
(:mod:`~training.refit.split`); both gates are then scored on those held-out requests,
paired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pandas as pd

from app.bundle.columns import Columns
from app.bundle.loader import BundleError, open_bundle
from app.bundle.manifest import Manifest
from app.bundle.mixture import mix_classification, mix_regression
from training.errors import NotFittedError, ParameterError
from training.evaluate import BOOTSTRAP_RESAMPLES
from training.evidence import Evidence, classification_evidence, regression_evidence
from training.features import FeatureSchema
from training.gate_encoder import GateEncoder
from training.params import check_real
from training.refit.data import RefitRefused
from training.refit.experts import AddedExpert, expert_set
from training.refit.settings import build_gate
from training.refit.split import check_served_us, latest_requests, request_bootstrap_se

# Rows per run of the served graph: bounds its memory and paces the progress bar.
CHUNK_ROWS = 8192


def check_holdout(holdout: float) -> float:
    """The held-out share: enough rows to compare on, most left to fit."""
    return check_real("--holdout", holdout, low=0.05, high=0.5)


def take(columns: Columns, idx: np.ndarray | slice) -> Columns:
    """The rows ``idx`` of every column."""
    return {k: v[idx] for k, v in columns.items()}


class GateRefit:
    """Refit the gate of the bundle at ``path`` on outcome rows; keep its experts.

    Parameters
    ----------
    path : Path
        The source version's directory.
    holdout : float, default=0.2
        Share of the rows held out to compare the refitted gate with the served one: the
        latest requests, whole, as near this share as requests allow
        (:func:`~training.refit.split.latest_requests`).
    combiner : str or None, default=None
        The gate to fit, by name (``--combiner``), with its defaults; None keeps the
        bundle's own with the settings its manifest records.
    params : dict or None, default=None
        Hyperparameters that override those settings (or the named combiner's defaults),
        e.g. ``{"kl_weight": 0.1}``.
    random_state : int or None, default=None
        Seeds the gate and the bootstrap; None keeps the seed the bundle's gate records
        (0 if none).
    add : sequence of AddedExpert, default=()
        Models that join the refitted gate's experts, after the bundle's
        (:mod:`~training.refit.experts`).
    retire : sequence of str, default=()
        The bundle's experts the refitted gate leaves out.
    verbose : bool, default=False
        Progress bars.

    Attributes
    ----------
    manifest_ : Manifest
        The source version's manifest.
    schema_ : FeatureSchema
        Its features and input rule.
    encoder_ : GateEncoder
        The gate's view of the features, fitted on the fitting rows.
    combiner_ : Combiner
        The refitted gate.
    expert_names_ : list of str
        Its experts: the bundle's less those retired, then those added.
    outputs_ : ndarray
        Their outputs on every row (probabilities, or standardised means), in that order.
    served_outputs_ : ndarray
        The bundle's experts' outputs, as the served graph gives them.
    sigmas_ : ndarray
        Regression: each of ``expert_names_``'s spread in standardised units, the bundle's
        as recorded and an added one's estimated on the fitting rows only (NaN for
        classification).
    settings_ : dict
        The hyperparameters it was built with, ``random_state`` included.
    seed_ : int
        Its ``random_state``, which seeds the bootstrap too.
    temperature_ : float
        The refitted mixture temperature (1 for combiners that fit none).
    fit_rows_, held_out_ : ndarray of int
        Positions of the rows the gate was fitted on, and of the held-out rows: the
        latest requests, every one served at or after the last fitted row.
    served_ranges_ : dict
        First and last serving time of each set, ``{"fit": (first, last), "held_out":
        (first, last)}``, in the units of ``served_us``.
    n_held_requests_ : int
        Requests among the held-out rows.
    comparison_ : dict
        Held-out NLL of the served (``old_nll``) and refitted (``new_nll``) gate, their
        paired ``difference`` (new minus old) and its ``se_difference``, bootstrapped over
        the held-out requests.
    mean_weights_ : dict
        Mean weight per expert on the held-out rows, ``{"old": {...}, "new": {...}}``.
    held_weights_ : dict
        Both gates' weights on the held-out rows, ``{"old": ..., "new": ...}``.
    y_held_ : ndarray
        The held-out outcomes, encoded.
    """

    def __init__(
        self,
        path: Path,
        *,
        holdout: float = 0.2,
        combiner: str | None = None,
        params: dict[str, Any] | None = None,
        random_state: int | None = None,
        add: Sequence[AddedExpert] = (),
        retire: Sequence[str] = (),
        verbose: bool = False,
    ) -> None:
        self.path = path
        self.holdout = holdout
        self.combiner = combiner
        self.params = params
        self.random_state = random_state
        self.add = add
        self.retire = retire
        self.verbose = verbose

    def fit(
        self,
        X: pd.DataFrame,
        y: np.ndarray,
        served_us: np.ndarray | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> GateRefit:
        """Fit on raw inputs ``X`` and outcomes ``y`` served at ``served_us`` (integer
        times; None: in the order given, one request per row); ``progress(done, total)``
        follows the experts' rows."""
        holdout = check_holdout(self.holdout)
        try:
            bundle = open_bundle(Path(self.path))
        except BundleError as exc:
            raise ParameterError("path", str(self.path), str(exc)) from None
        self.manifest_ = m = bundle.manifest
        gate, self.settings_ = build_gate(
            m, self.combiner, self.params, random_state=self.random_state, verbose=self.verbose
        )
        self.seed_ = int(self.settings_["random_state"])
        self.schema_ = FeatureSchema(tuple(m.features), m.input_rule.normaliser())
        columns = self.schema_.columns(X)
        y_enc = self.encode_target(y)
        n = len(y_enc)
        served = np.arange(n) if served_us is None else check_served_us(served_us, n)
        split = latest_requests(served, holdout)
        self.fit_rows_, self.held_out_ = fit_rows, held = split.fit, split.held_out
        self.n_held_requests_ = split.n_held_requests
        self.served_ranges_ = {
            k: (int(served[rows].min()), int(served[rows].max()))
            for k, rows in (("fit", fit_rows), ("held_out", held))
        }
        self.served_outputs_, old_w = self._served(bundle.session, columns, n, progress)
        self.expert_names_, self.outputs_, self.sigmas_ = expert_set(
            m, self.served_outputs_, columns, y_enc[fit_rows], fit_rows, self.add, self.retire
        )
        names = [self.schema_.name_of(i) for i in m.gate.inputs]
        self.encoder_ = GateEncoder(self.schema_.subset(names)).fit(take(columns, fit_rows))
        Z = self.encoder_.transform(columns)
        evidence = self.evidence(self.outputs_[fit_rows], y_enc[fit_rows])
        self.combiner_ = gate.fit(Z[fit_rows], evidence)
        self.temperature_ = float(getattr(self.combiner_, "temperature_", 1.0))
        self.fit_weights_ = self.combiner_.weights(Z[fit_rows])
        self.held_weights_ = {"old": old_w[held], "new": self.combiner_.weights(Z[held])}
        self.y_held_ = y_enc[held]
        self._compare(split.held_requests)
        self.columns_check_ = take(columns, held[:512])
        self.outputs_check_ = self.outputs_[held[:512]]
        return self

    def _compare(self, requests: np.ndarray) -> None:
        """Both gates on the held-out rows: NLL, the paired difference, its standard error
        over the held-out requests, and mean weights."""
        held, y, w = self.held_out_, self.y_held_, self.held_weights_
        old_t = self.manifest_.mixture.temperature
        old = self.row_nll(w["old"], self.served_outputs_[held], y, old_t, self.served_sigmas)
        new = self.row_nll(w["new"], self.outputs_[held], y, self.temperature_, self.sigmas_)
        diff = new - old
        self.comparison_ = {
            "old_nll": float(old.mean()),
            "new_nll": float(new.mean()),
            "difference": float(diff.mean()),
            "se_difference": request_bootstrap_se(diff, requests, self.seed_),
            "resamples": BOOTSTRAP_RESAMPLES,
            "n_fit": len(self.fit_rows_),
            "n_held_out": len(y),
            "n_held_requests": self.n_held_requests_,
        }
        names = {"old": self.manifest_.expert_names, "new": self.expert_names_}
        self.mean_weights_ = {
            k: dict(zip(names[k], w[k].mean(axis=0).tolist(), strict=True)) for k in names
        }

    @property
    def better(self) -> bool:
        """Whether the refitted gate beats the served one by more than the paired SE."""
        if not hasattr(self, "comparison_"):
            raise NotFittedError("GateRefit is not fitted; call fit first")
        c = self.comparison_
        return bool(c["difference"] < -c["se_difference"])

    # -- the task's pieces ------------------------------------------------------------------
    def encode_target(self, y: np.ndarray) -> np.ndarray:
        """Class codes of the bundle's classes, or the target standardised as training did."""
        target = self.manifest_.target
        if self.manifest_.task == "classification":
            assert target.classes is not None
            codes = {str(c): k for k, c in enumerate(target.classes)}
            out = np.empty(len(y), dtype=np.int64)
            for i, label in enumerate(y):
                code = codes.get(str(label))
                if code is None:
                    raise RefitRefused(
                        f"outcome {label!r} is not one of the bundle's classes "
                        f"({', '.join(map(str, target.classes))})"
                    )
                out[i] = code
            return out
        try:
            values = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise RefitRefused("outcomes must be numbers for a regression bundle") from None
        assert target.mean is not None and target.scale is not None
        return (values - target.mean) / target.scale

    def evidence(self, outputs: np.ndarray, y_enc: np.ndarray) -> Evidence:
        m = self.manifest_
        if m.task == "classification":
            return classification_evidence(outputs, y_enc)
        return regression_evidence(
            outputs, y_enc, self.sigmas_, y_low=m.target.low or 0.0, y_high=m.target.high or 0.0
        )

    @property
    def served_sigmas(self) -> np.ndarray:
        """The bundle's experts' spreads as its manifest records them (NaN: classification)."""
        return np.array([e.sigma for e in self.manifest_.experts], dtype=np.float64)

    def row_nll(
        self,
        weights: np.ndarray,
        outputs: np.ndarray,
        y_enc: np.ndarray,
        temperature: float,
        sigmas: np.ndarray,
    ) -> np.ndarray:
        """Per-row NLL of a mixture; regression in the target's units."""
        if self.manifest_.task == "classification":
            p = mix_classification(weights, outputs, temperature).proba
            return -np.log(np.clip(p[np.arange(len(y_enc)), y_enc], 1e-300, None))
        mix = mix_regression(weights, outputs, sigmas, temperature)
        scale = self.manifest_.target.scale or 1.0
        return np.log(scale) - mix.logpdf(y_enc)

    def _served(
        self,
        session: ort.InferenceSession,
        columns: Columns,
        n: int,
        progress: Callable[[int, int], None] | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The experts' outputs (probabilities, or standardised means) and the served
        gate's weights, from the served graph, in chunks."""
        m: Manifest = self.manifest_
        wanted = (
            ["expert_probabilities", "weights"]
            if m.task == "classification"
            else ["expert_means", "weights"]
        )
        parts: list[list[Any]] = [[], []]
        for start in range(0, n, CHUNK_ROWS):
            chunk = take(columns, slice(start, start + CHUNK_ROWS))
            for k, out in enumerate(session.run(wanted, chunk)):
                parts[k].append(np.asarray(out, dtype=np.float64))
            if progress is not None:
                progress(min(start + CHUNK_ROWS, n), n)
        outputs, weights = (np.concatenate(p) for p in parts)
        if m.task == "regression":
            assert m.target.mean is not None and m.target.scale is not None
            outputs = (outputs - m.target.mean) / m.target.scale
        return outputs, weights
