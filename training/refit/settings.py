"""The gate a refit fits: the bundle's own combiner with the settings its manifest records
(``gate.params``), or what the caller names instead.

A refit changes what the gate learnt, not how it learns: a bundle trained with another
combiner, KL weight, objective or network refits with the same, unless told otherwise.
"""

from __future__ import annotations

from typing import Any

from app.bundle.manifest import Manifest
from training.combiners.base import Combiner
from training.combiners.registry import combiner_class, make_combiner
from training.errors import ParameterError
from training.refit.data import RefitRefused


def gate_settings(
    manifest: Manifest, combiner: str | None, params: dict[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """The combiner a refit fits and its hyperparameters: with ``combiner`` None, the
    bundle's own with the settings its manifest records; else ``combiner`` (the bundle's
    own too) with its defaults. ``params`` override either. ``selected`` (what the last
    fit chose) is a record, not a setting."""
    name = manifest.gate.combiner if combiner is None else combiner
    accepted = set(combiner_class(name)._get_param_names())
    settings: dict[str, Any] = {}
    if combiner is None:
        settings = {k: v for k, v in manifest.gate.params.items() if k != "selected"}
        stale = sorted(set(settings) - accepted)
        if stale:
            raise RefitRefused(
                f"the bundle's gate records {stale[0]}={settings[stale[0]]!r}, which is not a "
                f"parameter of {name!r} here; --combiner {name} refits it with its defaults"
            )
    for key, value in (params or {}).items():
        if key not in accepted:
            raise ParameterError(
                key, value, f"is not a parameter of the {name!r} gate being refitted"
            )
        settings[key] = value
    return name, settings


def build_gate(
    manifest: Manifest,
    combiner: str | None,
    params: dict[str, Any] | None,
    *,
    random_state: int | None,
    verbose: bool,
) -> tuple[Combiner, dict[str, Any]]:
    """The unfitted gate of :func:`gate_settings`, and its settings. ``random_state`` None
    keeps the recorded seed (0 if none); ``verbose`` is how the fit reports, not a setting."""
    name, settings = gate_settings(manifest, combiner, params)
    recorded = settings.get("random_state")
    if random_state is not None:
        settings["random_state"] = random_state
    elif not isinstance(recorded, int) or isinstance(recorded, bool):
        settings["random_state"] = 0
    settings.pop("verbose", None)
    shown = {"verbose": verbose} if "verbose" in combiner_class(name)._get_param_names() else {}
    return make_combiner(name, **settings, **shown), settings
