"""Mixture of experts (Jacobs et al. 1991) over frozen experts: a softmax-MLP gate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from training.combiners.base import Combiner, check_features, check_fit_inputs
from training.errors import ParameterError
from training.evidence import Evidence
from training.nn.net import HIDDEN, mlp_logits, softmax_f32
from training.nn.trainer import Member, train_members
from training.onnx_graph import GraphBuilder, dense_layers
from training.params import check_int, check_positive


class MoECombiner(Combiner):
    """A gating network ``g(x) = softmax(MLP(x))`` trained on the mixture likelihood.

    The loss is ``-mean_i logsumexp_j(log g_j(x_i) + L[i, j])`` with the experts frozen.
    It is IA-BMA's ``"marginal"`` objective at ``kl_weight = 0``, so the same trainer
    (:func:`~training.nn.trainer.train_members`) fits it and the two differ only in the
    prior term.

    Parameters
    ----------
    hidden_layer_sizes : sequence of int, default=(64, 32, 16)
        ReLU hidden layers of the gate.
    learning_rate : float, default=1e-3
        Adam step size.
    batch_size : int, default=64
    epochs : int, default=10
    random_state : int, default=0
        Seeds the initialisation and the minibatch order.

    Attributes
    ----------
    layers_ : list of (W, b) float32 pairs
        The trained gate, last layer linear (the logits).
    n_features_in_ : int
    """

    name = "moe"

    def __init__(
        self,
        hidden_layer_sizes: Sequence[int] = HIDDEN,
        learning_rate: float = 1e-3,
        batch_size: int = 64,
        epochs: int = 10,
        random_state: int = 0,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.epochs = epochs
        self.random_state = random_state

    def _validate(self) -> None:
        hidden = tuple(self.hidden_layer_sizes)
        if not all(isinstance(h, (int, np.integer)) and h >= 1 for h in hidden):
            raise ParameterError(
                "hidden_layer_sizes", self.hidden_layer_sizes, "must be positive integers"
            )
        check_int("batch_size", self.batch_size)
        check_int("epochs", self.epochs)
        check_positive("learning_rate", self.learning_rate)
        check_int("random_state", self.random_state, minimum=0)

    def fit(self, Z: np.ndarray, evidence: Evidence) -> MoECombiner:
        """Train the gate with Adam on minibatches.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
            Encoded gate features, ``d >= 1``.
        evidence : Evidence
            ``L`` is all the gate needs.

        Returns
        -------
        self
        """
        Z = check_fit_inputs(Z, evidence)
        self._validate()
        if Z.shape[1] == 0:
            raise ParameterError("Z", Z.shape, "needs at least one feature column for a gate")
        # At kl_weight = 0 the prior never enters the loss; zeros satisfy the trainer's shape.
        no_prior = np.zeros((1, evidence.n, evidence.m), dtype=np.float32)
        result = train_members(
            Z,
            evidence.log_lik,
            no_prior,
            [Member("marginal", 0.0)],
            hidden=tuple(int(h) for h in self.hidden_layer_sizes),
            learning_rate=float(self.learning_rate),
            batch_size=int(self.batch_size),
            epochs=int(self.epochs),
            random_state=int(self.random_state),
        )
        layers = result.layers[0]
        assert layers is not None  # only members pruned by a search have none
        self.layers_ = layers
        self.n_features_in_ = Z.shape[1]
        return self

    def weights(self, Z: np.ndarray) -> np.ndarray:
        """``softmax(MLP(Z))``: the float32 forward pass of the ONNX graph."""
        self._check_fitted("layers_")
        w = softmax_f32(mlp_logits(check_features(Z, self.n_features_in_), self.layers_))
        # float32 rows sum to 1 only within ~1e-7; renormalising in float64 makes the
        # simplex exact without moving any weight by more than that.
        return w / w.sum(axis=1, keepdims=True)

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        self._check_fitted("layers_")
        return g.softmax_rows(dense_layers(g, z, self.layers_))
