"""The experts.toml file: a team's already trained models, one ``[[experts]]`` table each.

::

    [[experts]]
    name = "ridge"                   # required
    source = "models/ridge.skops"    # required: a file (see training.experts.sources)
                                     # or models:/name/version, models:/name@alias
    features = ["alcohol", "pH"]     # optional: the model's input order
    variance_output = "variance"     # optional, regression: the predictive variance
    classes = ["no", "yes"]          # optional, classification: the model's class order

Relative paths resolve against the file's own folder. :func:`read_experts_toml` reads it
into an :class:`~training.experts.spec.ExpertRegistry` of pre-fitted experts; any fault is a
:class:`~training.errors.ParameterError` naming the file, the expert and the key.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from app.bundle.manifest import check_safe_name
from training.errors import ParameterError
from training.experts.sources import load_source
from training.experts.spec import Expert, ExpertRegistry

KEYS = ("name", "source", "features", "variance_output", "classes")


def read_experts_toml(path: str | Path, *, task: str, trust_pickle: bool = False) -> ExpertRegistry:
    """Read ``path`` and load every model it names.

    Parameters
    ----------
    path : str or Path
        The experts.toml file.
    task : {"regression", "classification"}
        What the models predict: it decides how XGBoost and LightGBM files are read, and
        which of ``variance_output`` and ``classes`` applies.
    trust_pickle : bool
        Allow pickled models (see :func:`training.experts.sources.load_source`).

    Returns
    -------
    ExpertRegistry
        One pre-fitted expert per table, in the file's order, each with its ``Source``.
    """
    path = Path(path)
    tables = _tables(path)
    registry = ExpertRegistry()
    for i, table in enumerate(tables):
        name = _name(path, i, table)
        if name in registry.names:
            raise _fault(path, f"expert {name!r}", "is named twice; names must be unique")
        registry.add(_expert(path, name, table, task, trust_pickle))
    return registry


def _fault(path: Path, where: str, problem: str) -> ParameterError:
    return ParameterError("experts", str(path), f"{where}: {problem}")


def _tables(path: Path) -> list[dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParameterError("experts", str(path), "is not an existing file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError("experts", str(path), f"cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError("experts", str(path), f"is not valid TOML: {exc}") from None
    extra = sorted(set(data) - {"experts"})
    if extra:
        raise _fault(path, "top level", f"unknown key {extra[0]!r}; only [[experts]] tables")
    tables = data.get("experts")
    if not isinstance(tables, list) or not tables:
        raise _fault(path, "[[experts]]", "no expert tables; write one [[experts]] per model")
    if not all(isinstance(t, dict) for t in tables):
        raise _fault(path, "experts", "must be [[experts]] tables, not a list of values")
    return tables


def _name(path: Path, i: int, table: dict[str, Any]) -> str:
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise _fault(path, f"expert #{i + 1}", 'needs name = "..." (a non-empty string)')
    try:  # it names files in the bundle
        check_safe_name(name, "expert name")
    except ValueError as exc:
        raise _fault(path, f"expert {name!r}", str(exc)) from None
    return name


def _expert(path: Path, name: str, table: dict[str, Any], task: str, trust_pickle: bool) -> Expert:
    where = f"expert {name!r}"
    unknown = [k for k in table if k not in KEYS]
    if unknown:
        raise _fault(path, where, f"unknown key {unknown[0]!r}; known keys: {', '.join(KEYS)}")
    source = table.get("source")
    if not isinstance(source, str) or not source:
        raise _fault(path, where, 'needs source = "..." (a file path or models:/...)')
    features = table.get("features")
    if features is not None and (
        not isinstance(features, list)
        or not features
        or not all(isinstance(f, str) for f in features)
    ):
        raise _fault(path, where, f"features={features!r} must be a list of column names")
    variance = table.get("variance_output")
    if variance is not None and (not isinstance(variance, str) or task != "regression"):
        raise _fault(
            path, where, f"variance_output={variance!r} must be an output's name, in regression"
        )
    classes = table.get("classes")
    if classes is not None and (
        not isinstance(classes, list)
        or len(classes) < 2
        or len(set(map(repr, classes))) != len(classes)
        or task != "classification"
    ):
        raise _fault(
            path,
            where,
            f"classes={classes!r} must list two or more distinct labels, in classification",
        )
    try:
        model, src = load_source(source, base=path.parent, trust_pickle=trust_pickle, task=task)
    except ParameterError as exc:
        raise _fault(path, where, f"source={source!r} {exc.problem}") from None
    return Expert(
        name,
        model,
        features=None if features is None else tuple(features),
        # A team's model reads the raw columns: its own preprocessing is inside it.
        preprocess="none",
        prefit=True,
        classes=None if classes is None else tuple(classes),
        variance_output=variance,
        source=src,
    )
