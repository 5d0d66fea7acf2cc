"""The context lines at the top of ``results.md`` and the versions in ``details.json``."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from training.experiments.protocol import RepData


def header_lines(
    rd: RepData, reps: int, protocol: dict[str, Any], paper_literal: bool, base_seed: int
) -> list[str]:
    """What a reader needs to know to interpret the table: data, protocol, likelihoods."""
    p = protocol
    share = f"{1 - p['test_size']:.0%}/{p['test_size']:.0%}"
    if rd.dataset == "simulation":
        split = "independent draws of 1000 training and 500 test points (the paper's simulation)"
    elif rd.task == "classification":
        balance = "balanced by downsampling" if p["balance_classes"] else "left unbalanced"
        split = f"{share} split stratified on the label, training split {balance}"
    else:
        split = f"{share} split stratified on {p['quantile_bins']} quantile bins of the target"
    if rd.dataset != "simulation":
        split += "; feature bundles B1-B7 and all preprocessing from the training split only"
    evidence = (
        "in-sample likelihoods for every method; `iabma` uses the `iabma_paper` settings"
        if paper_literal
        else f"out-of-fold ({p['cv']}-fold) likelihoods; `iabma_paper` in-sample"
    )
    seeds = f"seeds {base_seed}..{base_seed + reps - 1}" if reps > 1 else f"seed {base_seed}"
    return [
        f"task: {rd.task}, reps: {reps} ({seeds})",
        f"protocol: {split}",
        f"experts: {', '.join(rd.expert_names)} (refitted on the whole training split)",
        f"combiners learn from {evidence}",
        f"--paper-literal: {'on' if paper_literal else 'off'}",
    ]


def versions() -> dict[str, str]:
    """Python and the libraries whose versions can change the numbers."""
    out = {"python": platform.python_version()}
    for pkg in ("numpy", "scipy", "scikit-learn", "torch", "pandas", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out
