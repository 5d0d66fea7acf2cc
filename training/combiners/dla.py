"""Dynamic Local Accuracy (Woods, Kegelmeyer & Bowyer 1997), soft version.

Each expert is scored by how well it did on the k training rows nearest to x in the gate
features, and the scores become weights through a tempered softmax. Hard OLA (select the
locally most accurate expert) is the limit ``temperature -> 0``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from scipy.special import softmax

from training.combiners.base import Combiner, check_features, check_fit_inputs
from training.errors import ParameterError
from training.evidence import Evidence
from training.onnx_graph import GraphBuilder
from training.params import check_int, check_positive, check_real

# Rows of queries per distance block: bounds the (rows, n_train) float64 matrix in memory.
_CHUNK = 1024


def k_smallest(dist: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` smallest entries of each row, ties to the lowest index.

    The tie rule is ONNX ``TopK``'s, so the served graph picks the same neighbours.
    ``argpartition`` is fast but breaks ties arbitrarily; rows with a tie at the k-th
    distance fall back to a stable sort.
    """
    part = np.argpartition(dist, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(dist, part, axis=1).max(axis=1)
    tied = (dist <= kth[:, None]).sum(axis=1) > k
    if tied.any():
        part[tied] = np.argsort(dist[tied], axis=1, kind="stable")[:, :k]
    return part


class DLACombiner(Combiner):
    """Soft DLA: ``w(x) = softmax(s(x) / temperature)`` with ``s`` a local skill score.

    ``s_j(x)`` averages expert ``j``'s per-row score over the ``k`` training rows nearest
    to ``x`` (Euclidean, in the already standardised gate features):

    - classification: Laplace-smoothed local accuracy ``(correct + alpha) / (k + 2 alpha)``;
    - regression: minus the local MSE divided by ``var(y)``.

    At a training row the row itself is left out of its neighbourhood (its own correctness
    would otherwise vote for itself); ``train_weights_`` holds those leave-one-out weights.
    New rows use their ``k`` nearest training rows.

    Parameters
    ----------
    k : int, default=50
        Neighbourhood size; capped at ``n - 1`` when the training set is smaller.
    temperature : float, default=1.0
        Softmax temperature ``T``. As ``T -> 0`` the weights become one-hot on the locally
        best expert (hard OLA), split evenly between exact ties.
    alpha : float, default=1.0
        Laplace smoothing of the local accuracy (classification only).

    Attributes
    ----------
    n_neighbors_ : int
        The ``k`` actually used.
    point_scores_ : ndarray of shape (n, m)
        Per training row scores whose neighbourhood mean is ``s``:
        ``(k * correct + alpha) / (k + 2 alpha)``, or ``-squared error / var(y)``.
    train_Z_ : ndarray of shape (n, d), float32
    train_weights_ : ndarray of shape (n, m)
        Leave-one-out weights at the training rows.
    n_features_in_ : int
    """

    name = "dla"

    def __init__(self, k: int = 50, temperature: float = 1.0, alpha: float = 1.0) -> None:
        self.k = k
        self.temperature = temperature
        self.alpha = alpha

    def _validate(self) -> None:
        check_int("k", self.k)
        check_positive("temperature", self.temperature)
        check_real("alpha", self.alpha, low=0.0)

    def fit(self, Z: np.ndarray, evidence: Evidence) -> DLACombiner:
        """Store the training rows and their per-row scores.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
            Standardised gate features, ``d >= 1``.
        evidence : Evidence

        Returns
        -------
        self
        """
        Z = check_fit_inputs(Z, evidence)
        self._validate()
        if Z.shape[1] == 0:
            raise ParameterError("Z", Z.shape, "needs at least one feature column for distances")
        if evidence.n < 2:
            raise ParameterError("Z", Z.shape, "needs at least two rows to have neighbours")
        k = min(int(self.k), evidence.n - 1)
        if evidence.task == "classification":
            a = float(self.alpha)
            self.point_scores_ = (k * evidence.correct.astype(np.float64) + a) / (k + 2 * a)
        else:
            var = float(np.var(evidence.y))
            self.point_scores_ = -evidence.sq_error / (var if var > 0 else 1.0)
        self.n_neighbors_ = k
        self.train_Z_ = Z.copy()
        self.n_features_in_ = Z.shape[1]
        self.train_weights_ = self._softmax(self._local_scores(Z, exclude_self=True))
        return self

    def _local_scores(self, Z: np.ndarray, *, exclude_self: bool) -> np.ndarray:
        train = self.train_Z_.astype(np.float64)
        # |z - t|^2 = |z|^2 - 2 z.t + |t|^2; |z|^2 is the same for every t, so ranking
        # needs only the rest, which is also what the ONNX graph computes.
        sq_norm = np.sum(train * train, axis=1)
        out = np.empty((len(Z), self.point_scores_.shape[1]))
        for start in range(0, len(Z), _CHUNK):
            rows = np.arange(start, min(start + _CHUNK, len(Z)))
            dist = sq_norm[None, :] - 2.0 * (Z[rows].astype(np.float64) @ train.T)
            if exclude_self:
                dist[np.arange(len(rows)), rows] = np.inf
            idx = k_smallest(dist, self.n_neighbors_)
            out[rows] = self.point_scores_[idx].mean(axis=1)
        return out

    def _softmax(self, scores: np.ndarray) -> np.ndarray:
        return softmax(scores / float(self.temperature), axis=1)

    def local_scores(self, Z: np.ndarray) -> np.ndarray:
        """``s(x)``: (n, m) neighbourhood scores of new rows (smoothed accuracy or -MSE/var)."""
        self._check_fitted("point_scores_")
        return self._local_scores(check_features(Z, self.n_features_in_), exclude_self=False)

    def weights(self, Z: np.ndarray) -> np.ndarray:
        """``softmax(s(x) / temperature)`` over the ``k`` nearest training rows of each row."""
        return self._softmax(self.local_scores(Z))

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        """Distances by MatMul, TopK neighbours, Gather of the row scores, ReduceMean, softmax.

        Computed in float64 like :meth:`weights`, so the k-th neighbour is the same one
        unless two training rows are equidistant to ~1e-16.
        """
        self._check_fitted("point_scores_")
        train_t = g.cast(g.const(self.train_Z_.T.copy(), "train_z_t"))
        sq_norm = g.op(
            "ReduceSum",
            [g.op("Mul", [train_t, train_t]), g.const(np.array([0], dtype=np.int64))],
            keepdims=1,
        )
        cross = g.op("MatMul", [g.cast(z), train_t])
        dist = g.op("Sub", [sq_norm, g.op("Mul", [cross, g.const(2.0, f64=True)])])
        k = g.const(np.array([self.n_neighbors_], dtype=np.int64), "k")
        _, idx = g.op_multi("TopK", [dist, k], 2, axis=1, largest=0, sorted=1)
        near = g.op("Gather", [g.const(self.point_scores_, "point_scores", f64=True), idx], axis=0)
        scores = g.op("ReduceMean", [near], axes=[1], keepdims=0)
        logits = g.op("Div", [scores, g.const(float(self.temperature), f64=True)])
        return g.cast(g.softmax_rows(logits), TensorProto.FLOAT)
