"""The gate members' float32 numpy kernel: forward pass, backward pass (the gradient of
the logits given, layer by layer) and Adam over one flat parameter array, batched over
members. :mod:`training.nn.trainer` drives it; the tests hold it to torch's autograd and
``torch.optim.Adam``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from training.nn.net import PosteriorNet

BETAS = (0.9, 0.999)
EPS = 1e-8


@functools.cache
def _ones(rows: int, cols: int, dtype: np.dtype) -> np.ndarray:
    return np.ones((rows, cols), dtype=dtype)


def sum_last(a: np.ndarray) -> np.ndarray:
    """``a.sum(-1, keepdims=True)`` as a product with ones: numpy's reduction over a short
    last axis costs three times a BLAS call on arrays this small."""
    return np.matmul(a, _ones(a.shape[-1], 1, a.dtype))


def sum_rows(g: np.ndarray, out: np.ndarray) -> None:
    """``g.sum(axis=1, keepdims=True)`` into ``out`` (the bias gradient), likewise."""
    np.matmul(_ones(1, g.shape[1], g.dtype), g, out=out)


def max_last(a: np.ndarray) -> np.ndarray:
    """``a.max(-1, keepdims=True)`` as running maxima of the columns: with a handful of
    experts, numpy's reduction over the short last axis costs 2-5x these few calls."""
    top = a[..., :1].copy()
    for j in range(1, a.shape[-1]):
        np.maximum(top, a[..., j : j + 1], out=top)
    return top


def log_softmax(a: np.ndarray) -> np.ndarray:
    out = a - max_last(a)
    out -= np.log(sum_last(np.exp(out)))
    return out


def softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - max_last(a))
    e /= sum_last(e)
    return e


class FlatAdam:
    """All parameters in one flat float32 array with per-layer views; Adam as in torch.optim."""

    def __init__(self, net: PosteriorNet, lr: float) -> None:
        tensors = [*net.weights, *net.biases]
        self.theta = np.concatenate([t.detach().numpy().reshape(-1) for t in tensors])
        self.m = np.zeros_like(self.theta)
        self.v = np.zeros_like(self.theta)
        self.lr, self.t = lr, 0
        self.shapes = [tuple(t.shape) for t in tensors]
        self._views()
        self.n_layers = len(net.weights)

    @property
    def W(self) -> list[np.ndarray]:
        return self.params[: self.n_layers]

    @property
    def b(self) -> list[np.ndarray]:
        return self.params[self.n_layers :]

    def step(self) -> None:
        b1, b2 = BETAS
        self.t += 1
        self.m *= b1
        self.m += (1 - b1) * self.grad
        self.v *= b2
        self.v += (1 - b2) * np.square(self.grad)
        step_size = self.lr / (1 - b1**self.t)
        denom = np.sqrt(self.v)
        denom *= 1 / math.sqrt(1 - b2**self.t)
        denom += EPS
        self.theta -= step_size * self.m / denom

    def keep(self, idx: np.ndarray) -> None:
        """Drop every member not in ``idx`` (parameters and Adam's moments alike)."""

        def pick(flat: np.ndarray) -> np.ndarray:
            parts, start = [], 0
            for shape in self.shapes:
                size = math.prod(shape)
                parts.append(flat[start : start + size].reshape(shape)[idx].reshape(-1))
                start += size
            return np.concatenate(parts)

        self.theta, self.m, self.v = pick(self.theta), pick(self.m), pick(self.v)
        self.shapes = [(len(idx), *s[1:]) for s in self.shapes]
        self._views()

    def _views(self) -> None:
        self.grad = np.zeros_like(self.theta)
        offsets = np.cumsum([0] + [math.prod(s) for s in self.shapes])
        spans = list(zip(offsets[:-1], offsets[1:], self.shapes, strict=True))
        self.params = [self.theta[a:b].reshape(s) for a, b, s in spans]
        self.grads = [self.grad[a:b].reshape(s) for a, b, s in spans]

    def member_layers(self, i: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Member ``i``'s layers as float32 numpy ``(W, b)`` pairs."""
        return [(w[i].copy(), b[i, 0].copy()) for w, b in zip(self.W, self.b, strict=True)]


def forward(opt: FlatAdam, z: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits (K, B, m) and the hidden activations after ReLU (input first)."""
    W, b = opt.W, opt.b
    h = np.matmul(z, W[0])
    h += b[0]
    hidden = [z]
    for i in range(1, len(W)):
        np.maximum(h, 0.0, out=h)
        hidden.append(h)
        h = np.matmul(h, W[i])
        h += b[i]
    return h, hidden


def backward(opt: FlatAdam, g: np.ndarray, hidden: list[np.ndarray]) -> None:
    """Fill ``opt.grad`` from ``g`` = d loss / d logits, layer by layer."""
    W, gW, gb = opt.W, opt.grads[: opt.n_layers], opt.grads[opt.n_layers :]
    for i in range(len(W) - 1, 0, -1):
        np.matmul(hidden[i].transpose(0, 2, 1), g, out=gW[i])
        sum_rows(g, gb[i])
        g = np.matmul(g, W[i].transpose(0, 2, 1))
        g *= hidden[i] > 0
    np.matmul(hidden[0].T, g, out=gW[0])
    sum_rows(g, gb[0])
