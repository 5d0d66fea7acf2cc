"""PNG figures written next to the results: reliability, mean weights, weight fields."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from training.combiners.base import Combiner
from training.metrics import expected_calibration_error, reliability_bins

N_BINS = 15
_DPI = 110


def _tab10() -> Sequence[Any]:
    """The ten colours of the tab10 palette, one per expert."""
    cmap = plt.get_cmap("tab10")
    assert isinstance(cmap, ListedColormap)  # a palette, unlike the continuous maps
    return cast(Sequence[Any], cmap.colors)


def _grid(n: int, ncols: int, size: float = 3.0) -> tuple[Any, np.ndarray]:
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(size * ncols, size * nrows + 0.4), squeeze=False
    )
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.ravel()


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def reliability_diagrams(
    proba: Mapping[str, np.ndarray], y: np.ndarray, path: Path, title: str
) -> Path:
    """One panel per method: accuracy per confidence bin against the diagonal.

    ``proba[method]`` is ``(n, C)``, the test predictions of every repetition stacked, and
    ``y`` their labels. The ECE in each panel's title is over that pooled set, so it can
    differ a little from the mean over repetitions in the table.
    """
    methods = list(proba)
    fig, axes = _grid(len(methods), min(5, len(methods)))
    width = 1.0 / N_BINS
    centers = (np.arange(N_BINS) + 0.5) * width
    for ax, m in zip(axes, methods, strict=False):
        conf, acc, counts = reliability_bins(proba[m], y, N_BINS)
        filled = counts > 0
        ax.bar(
            centers[filled],
            acc[filled],
            width=width,
            color="tab:blue",
            alpha=0.75,
            edgecolor="white",
            label="accuracy",
        )
        ax.plot(
            conf[filled],
            acc[filled],
            "o-",
            color="tab:orange",
            ms=3,
            lw=1,
            label="(confidence, accuracy)",
        )
        ax.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="perfect calibration")
        ece = expected_calibration_error(proba[m], y, N_BINS)
        ax.set_title(f"{m}\nECE = {ece:.3f}", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence (top class)", fontsize=8)
        ax.set_ylabel("accuracy", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=6, loc="upper left")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def mean_weights(
    weights: Mapping[str, np.ndarray], expert_names: Sequence[str], path: Path, title: str
) -> Path:
    """Grouped bars: for each method, the mean weight it gives each expert.

    ``weights[method]`` is ``(m,)``, already averaged over test rows and repetitions.
    """
    methods = list(weights)
    m = len(expert_names)
    colors = _tab10()
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(methods) + 2), 4.2))
    x = np.arange(len(methods))
    width = 0.8 / m
    for j, name in enumerate(expert_names):
        vals = [weights[k][j] for k in methods]
        ax.bar(x - 0.4 + (j + 0.5) * width, vals, width=width, color=colors[j % 10], label=name)
    ax.axhline(1.0 / m, color="grey", ls=":", lw=1, label=f"uniform (1/{m})")
    ax.set_xticks(x, methods, rotation=30, ha="right")
    ax.set_ylabel("mean weight (test rows, all repetitions)")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    # Outside the axes: bars near 1.0 sit where an inside legend would go.
    ax.legend(title="expert", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def affine_map(X: np.ndarray, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(A, b)`` with ``Z = X @ A + b`` by least squares, checked to be exact.

    The simulation's gate features are the standardised coordinates, so the encoder is
    affine; recovering it from the test rows needs nothing from the protocol's internals.
    """
    design = np.column_stack([X, np.ones(len(X))])
    coef, *_ = np.linalg.lstsq(design, Z, rcond=None)
    A, b = coef[:-1], coef[-1]
    err = float(np.max(np.abs(X @ A + b - Z)))
    if err > 1e-3 * max(1.0, float(np.max(np.abs(Z)))):
        raise ValueError(f"the gate features are not an affine map of the inputs (error {err:.3g})")
    return A, b


def _field_image(w: np.ndarray, shape: tuple[int, int], colors: np.ndarray) -> np.ndarray:
    """RGB: the dominant expert's colour, faded toward white as its weight nears 1/m."""
    m = w.shape[1]
    top = w.argmax(axis=1)
    strength = np.clip((w.max(axis=1) - 1.0 / m) / (1.0 - 1.0 / m), 0.0, 1.0)[:, None]
    rgb = 1.0 - strength * (1.0 - colors[top])
    return rgb.reshape(*shape, 3)


def weight_fields(
    combiners: Mapping[str, Combiner],
    X_test: np.ndarray,
    Z_test: np.ndarray,
    y_test: np.ndarray,
    region_test: np.ndarray | None,
    expert_names: Sequence[str],
    path: Path,
    title: str,
    resolution: int = 150,
) -> Path:
    """The paper's Figure 2: the data, then each method's weight field over the 2-D input.

    Colour is the expert with the largest weight at that point; intensity is that weight
    (white where the weights are uniform).
    """
    A, b = affine_map(X_test, Z_test)
    lo, hi = X_test.min(axis=0), X_test.max(axis=0)
    pad = 0.05 * (hi - lo)
    g1 = np.linspace(lo[0] - pad[0], hi[0] + pad[0], resolution)
    g2 = np.linspace(lo[1] - pad[1], hi[1] + pad[1], resolution)
    G1, G2 = np.meshgrid(g1, g2)
    grid = np.column_stack([G1.ravel(), G2.ravel()])
    Zg = (grid @ A + b).astype(np.float32)
    colors = np.asarray(_tab10())[: len(expert_names)]
    extent = (g1[0], g1[-1], g2[0], g2[-1])

    fig, axes = _grid(len(combiners) + 1, min(4, len(combiners) + 1), size=3.2)
    ax = axes[0]
    regions = region_test if region_test is not None else np.zeros(len(y_test), int)
    for r, marker, rname in ((0, "o", "linear region"), (1, "^", "circular region")):
        for label, c in ((0, "tab:blue"), (1, "tab:red")):
            sel = (regions == r) & (y_test == label)
            if sel.any():
                ax.scatter(
                    X_test[sel, 0],
                    X_test[sel, 1],
                    s=9,
                    c=c,
                    marker=marker,
                    label=f"{rname}, y={label}",
                    alpha=0.8,
                    linewidths=0,
                )
    ax.set_title("test data", fontsize=9)
    ax.legend(fontsize=6, loc="lower left")
    for ax, (name, comb) in zip(axes[1:], combiners.items(), strict=False):
        img = _field_image(np.asarray(comb.weights(Zg)), (resolution, resolution), colors)
        ax.imshow(img, origin="lower", extent=extent, aspect="auto", interpolation="nearest")
        ax.scatter(X_test[:, 0], X_test[:, 1], s=1.5, c="k", alpha=0.25, linewidths=0)
        ax.set_title(name, fontsize=9)
    for ax in axes[: len(combiners) + 1]:
        ax.set_xlabel("x1", fontsize=8)
        ax.set_ylabel("x2", fontsize=8)
        ax.tick_params(labelsize=7)
    handles = [Patch(color=colors[j], label=n) for j, n in enumerate(expert_names)]
    fig.legend(
        handles=handles,
        title="dominant expert (faded = weight near 1/m)",
        loc="lower center",
        ncols=len(expert_names),
        fontsize=8,
        title_fontsize=8,
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path
