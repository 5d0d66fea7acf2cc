"""The gate's weights as histograms, and how far two of them are apart (PSI).

Training records, per expert, how the gate's weights fell on its training rows
(:class:`~app.bundle.manifest.WeightHistogram`); the server counts the weights it serves
into the same bins and compares. Both sides call :func:`weight_counts`, so a row lands in
the same bin on either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from app.bundle.manifest import Manifest

# Ten equal bins of [0, 1]: the last one holds 1.
WEIGHT_EDGES: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(11))
# A bin's share is floored here before the logarithm: an empty bin would make PSI infinite.
SHARE_FLOOR = 1e-4


def weight_bins(weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The bin of each weight: ``[e_k, e_{k+1})``, the last bin closed."""
    return np.searchsorted(edges[1:-1], weights, side="right")


def weight_counts(weights: np.ndarray, edges: tuple[float, ...] = WEIGHT_EDGES) -> np.ndarray:
    """(m, B) int64: per expert (a column of ``weights``), its rows in each bin."""
    bounds = np.asarray(edges, dtype=np.float64)
    bins = len(edges) - 1
    w = np.asarray(weights, dtype=np.float64)
    return np.stack(
        [np.bincount(weight_bins(w[:, j], bounds), minlength=bins) for j in range(w.shape[1])]
    ).astype(np.int64)


def psi(served: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The population stability index of each row of ``served`` against the same row of
    ``reference`` (counts per bin): ``sum_b (s_b - r_b) * ln(s_b / r_b)`` over the bins'
    shares. Under 0.1 is usually read as stable, over 0.25 as a major shift."""
    s = np.asarray(served, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    s = np.maximum(s / np.maximum(s.sum(axis=-1, keepdims=True), 1.0), SHARE_FLOOR)
    r = np.maximum(r / np.maximum(r.sum(axis=-1, keepdims=True), 1.0), SHARE_FLOOR)
    return np.sum((s - r) * np.log(s / r), axis=-1)


def gate_constant(manifest: Manifest) -> bool:
    """Whether the shipped gate gives every row the same weights (a pool), so that weight
    drift cannot move: the gate's own record of what it shipped when it has one (an IA-BMA
    gate that fell back to a pool), else every expert's training weights in one bin."""
    selected = manifest.gate.params.get("selected")
    if isinstance(selected, dict) and isinstance(selected.get("gate"), str):
        return bool(selected["gate"] != "network")
    histogram = manifest.gate.weight_histogram
    if histogram is None:
        return False
    return all(sum(1 for c in counts if c) <= 1 for counts in histogram.counts.values())
