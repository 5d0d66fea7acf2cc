"""The posterior network ``h_theta(x) = softmax(MLP(x))`` as a torch module.

The module holds ``K`` independent MLPs side by side (weights of shape ``(K, in, out)``),
so a whole hyperparameter grid trains in one pass over the data: one batched matmul per
layer instead of ``K`` small ones. ``K = 1`` is the plain network. The estimator that
trains it lives in :mod:`training.nn.trainer`; this file knows nothing of losses.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

HIDDEN = (64, 32, 16)


class PosteriorNet(nn.Module):
    """``K`` MLPs ``d -> hidden... -> m``, ReLU between layers, logits out.

    Parameters
    ----------
    n_in, n_out : int
        Input width (the encoded gate features) and the number of experts.
    hidden : sequence of int
        Hidden layer sizes; the paper's (64, 32, 16) by default.
    members : int
        How many independent networks to hold.
    generator : torch.Generator
        Seeds the initialisation, which is PyTorch's ``nn.Linear`` default per member:
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases.
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        hidden: Sequence[int] = HIDDEN,
        members: int = 1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        sizes = [n_in, *hidden, n_out]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            w = (torch.rand(members, fan_in, fan_out, generator=generator) * 2 - 1) * bound
            b = (torch.rand(members, 1, fan_out, generator=generator) * 2 - 1) * bound
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))

    @property
    def members(self) -> int:
        return int(self.weights[0].shape[0])

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``(B, d)`` features to ``(K, B, m)`` logits."""
        h = torch.matmul(z, self.weights[0]) + self.biases[0]
        for w, b in zip(self.weights[1:], self.biases[1:], strict=True):
            h = torch.baddbmm(b, torch.relu(h), w)
        return h


def mlp_logits(z: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The forward pass in float32 numpy, exactly as the exported ONNX graph computes it."""
    h = np.asarray(z, dtype=np.float32)
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h


def softmax_f32(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float64)


def mean_softmax(
    z: np.ndarray, nets: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]]
) -> np.ndarray:
    """The mean over ``nets`` of ``softmax(mlp_logits(z))`` (float64), as the exported
    graph computes it."""
    return np.mean([softmax_f32(mlp_logits(z, layers)) for layers in nets], axis=0)
