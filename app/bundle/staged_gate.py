"""A staged version opened for shadow scoring: its answer from the served one's experts.

A refitted version shares its expert files byte for byte with the served one: then only
its ``gate.onnx`` runs, and its mixture weighs the served experts' outputs. A version
with an expert the served one lacks (or one whose file differs) runs its own fused graph
whole instead: that expert costs what it costs. Either way :meth:`StagedGate.score`
gives the staged weights and what scoring its mixture needs (docs/serving.md, "Shadow").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.bundle.loader import (
    BundleError,
    open_bundle,
    read_manifest,
    session_options,
    verify_files,
)
from app.bundle.manifest import MANIFEST_FILE, Manifest
from app.bundle.pointer import RolloutError
from app.bundle.predictor import BundlePredictor, Prediction
from app.bundle.staged import check_feedable


@dataclass(frozen=True)
class Shadowed:
    """The staged answer to a batch: ``weights`` (n, m') and its mixture's ``tail``:
    classification probabilities (n, C); regression the experts' means then their sds
    after the temperature, target units, side by side (n, 2 m')."""

    weights: np.ndarray
    tail: np.ndarray

    def blob(self) -> bytes:
        return np.ascontiguousarray(np.hstack([self.weights, self.tail]), "<f8").tobytes()


# The served experts' outputs a staged gate weighs: (n, m, C) probabilities, or (n, m)
# means and, where the bundle serves them, (n, m) sds; the others None.
ExpertOutputs = tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]


def expert_outputs(pred: Prediction) -> ExpertOutputs:
    return pred.expert_proba, pred.expert_means, pred.expert_sds


class StagedGate:
    """A staged version, opened against the served version ``served``."""

    def __init__(self, path: Path, served: Manifest, intra_op_threads: int = 1) -> None:
        path = Path(path)
        manifest = read_manifest(path)
        if manifest.version != path.name:
            raise BundleError(
                f"{path / MANIFEST_FILE} says version {manifest.version!r}, "
                f"but the bundle lives in {path.name!r}"
            )
        try:
            check_feedable(served, manifest)
        except RolloutError as exc:
            raise BundleError(str(exc)) from None
        verify_files(path, manifest)
        self.manifest = manifest
        self.served_version = served.version
        self.version = manifest.version
        self.experts = tuple(manifest.expert_names)
        self._per_row = np.array([e.variance_output is not None for e in manifest.experts])
        scale = float(manifest.target.scale or 1.0)
        self._sds = np.array([(e.sigma or 1.0) * scale for e in manifest.experts])
        self._temperature = float(manifest.mixture.temperature)
        have = {(e.name, e.sha256): j for j, e in enumerate(served.experts)}
        served_rows = any(e.variance_output for e in served.experts)
        pick = [have.get((e.name, e.sha256)) for e in manifest.experts]
        self.gate_only = all(j is not None for j in pick) and (
            served_rows or not self._per_row.any()
        )
        self.pick = np.array([j or 0 for j in pick], dtype=np.intp)
        self._predictor: BundlePredictor | None = None
        self._gate: ort.InferenceSession | None = None
        if self.gate_only:
            self._gate = _gate_session(path, manifest, intra_op_threads)
            self.needs = tuple(i.name for i in self._gate.get_inputs())
        else:
            self._predictor = BundlePredictor(open_bundle(path, intra_op_threads=intra_op_threads))
            self.needs = tuple(self._predictor._inputs)

    def score(self, columns: Mapping[str, np.ndarray], served: ExpertOutputs) -> Shadowed:
        """The staged answer to the rows ``columns`` (those of :attr:`needs` at least), to
        which the served experts answered ``served`` (only read when :attr:`gate_only`)."""
        if self._predictor is not None:
            own = self._predictor.predict(columns, interval=False)
            return self._mixture(own.weights, own.expert_proba, own.expert_means, own.expert_sds)
        assert self._gate is not None
        (raw,) = self._gate.run(["weights"], {k: columns[k] for k in self.needs})
        w = np.asarray(raw, dtype=np.float64)
        w = w / w.sum(axis=1, keepdims=True)  # as the fused graph normalises its rows
        p = self.pick
        return self._mixture(w, *(None if a is None else a[:, p] for a in served))

    def _mixture(
        self,
        w: np.ndarray,
        proba: np.ndarray | None,
        means: np.ndarray | None,
        sds: np.ndarray | None,
    ) -> Shadowed:
        if proba is not None:
            return Shadowed(w, _mix(w, proba, self._temperature))
        assert means is not None
        std = np.broadcast_to(self._sds, means.shape)
        if sds is not None and self._per_row.any():
            std = np.where(self._per_row, sds, std)
        return Shadowed(w, np.hstack([means, std * self._temperature]))


def _mix(w: np.ndarray, proba: np.ndarray, temperature: float) -> np.ndarray:
    """The tempered mixture of experts' probabilities, as the fused graph computes it
    (``softmax(log p / T)`` per expert is ``p ** (1/T)`` renormalised). The served ones are
    clipped and normalised already. Sums over the classes are products with a vector of
    ones: numpy's reductions along a short last axis took 8x the time on 1000 rows."""
    ones = np.ones(proba.shape[-1])
    if temperature != 1.0:
        proba = proba ** (1.0 / temperature)
        w = w / (proba @ ones)  # each expert's own normalisation, folded into its weight
    mixed = np.einsum("nm,nmc->nc", w, proba)
    return mixed / (mixed @ ones)[:, None]


def _gate_session(path: Path, manifest: Manifest, threads: int) -> ort.InferenceSession:
    rel = manifest.gate.file
    try:
        options = session_options(threads)
        sess = ort.InferenceSession(
            str(path / rel), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise BundleError(f"onnxruntime cannot load {rel}: {exc}") from None
    inputs = {f.input for f in manifest.features}
    foreign = sorted(i.name for i in sess.get_inputs() if i.name not in inputs)
    if foreign or "weights" not in {o.name for o in sess.get_outputs()}:
        raise BundleError(f"{rel} does not take the features to weights: {foreign or 'no output'}")
    return sess
