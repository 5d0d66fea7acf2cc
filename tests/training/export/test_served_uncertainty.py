"""The served graph's classification uncertainty split at temperatures other than 1.

Each expert is tempered before mixing, and every entropy is taken on the tempered experts,
so total = aleatoric + epistemic holds exactly, with epistemic the mutual information
``sum_j alpha_j KL(f~_j || mixture)``, computed here independently of the graph.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from app.bundle.mixture import mix_classification
from training.export.ensemble import Target, mixture_outputs
from training.onnx_graph import GraphBuilder

N, M, C = 64, 3, 4


def _served(weights: np.ndarray, proba: np.ndarray, temperature: float) -> dict[str, np.ndarray]:
    g = GraphBuilder("mixture")
    w = g.add_input("w", TensorProto.FLOAT, M)
    outs = [(g.add_input(f"p{j}", TensorProto.FLOAT, C), False) for j in range(M)]
    mixture_outputs(g, w, outs, Target("classification", n_classes=C), temperature)
    sess = ort.InferenceSession(g.build().SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"w": weights.astype(np.float32)}
    feed |= {f"p{j}": proba[:, j].astype(np.float32) for j in range(M)}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feed), strict=True))


@pytest.mark.parametrize("temperature", [0.3, 1.0, 3.0])
def test_served_split_adds_up_and_is_the_mutual_information(temperature: float) -> None:
    rng = np.random.default_rng(7)
    weights = rng.dirichlet(np.ones(M), N).astype(np.float32).astype(np.float64)
    weights /= weights.sum(axis=1, keepdims=True)
    proba = rng.dirichlet(np.ones(C) * 0.4, (N, M)).astype(np.float32).astype(np.float64)
    proba = np.clip(proba, 1e-6, 1 - 1e-6)
    proba /= proba.sum(axis=2, keepdims=True)
    got = _served(weights, proba, temperature)
    total, aleatoric, epistemic, selection = got["uncertainty"].T

    tempered = proba ** (1 / temperature)
    tempered /= tempered.sum(axis=2, keepdims=True)
    mixture = np.einsum("nm,nmc->nc", weights, tempered)
    kl = (tempered * np.log(tempered / mixture[:, None, :])).sum(axis=2)
    np.testing.assert_allclose(got["probabilities"], mixture, atol=1e-6)
    np.testing.assert_allclose(epistemic, (weights * kl).sum(axis=1), atol=1e-6)
    np.testing.assert_allclose(total, aleatoric + epistemic, rtol=0, atol=1e-12)
    assert (epistemic > 0).all()  # real disagreement everywhere, and never clipped to 0
    # The in-memory estimator's arithmetic gives the same split.
    mem = mix_classification(weights, proba, temperature)
    np.testing.assert_allclose(total, mem.total, atol=1e-6)
    np.testing.assert_allclose(aleatoric, mem.aleatoric, atol=1e-6)
    np.testing.assert_allclose(selection, mem.selection, atol=1e-6)
