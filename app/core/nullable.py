"""Which features a bundle takes as missing (``null``), found by asking its graph.

A missing number reaches the experts as NaN. Trees route it down a branch; a linear
expert without an imputer answers NaN, which the server refuses (422
``non_finite_output``). The manifest does not say which experts are which, so each
feature is tried once, missing in an otherwise valid row, and the answer is kept per
bundle. The OpenAPI document marks only these features nullable.
"""

from __future__ import annotations

from typing import Any

from app.core.runtime import LoadedModel

_KEY = "nullable_features"


def valid_row(model: LoadedModel) -> dict[str, Any]:
    """A row every bundle takes: 1.0 for numbers, the first category of the others."""
    table = model.features
    return {
        name: 1.0 if name in table.numeric else table.categories[name].categories[0]
        for name in table.names
    }


def nullable_features(model: LoadedModel) -> frozenset[str]:
    """The features whose ``null`` alone, in :func:`valid_row`, still gives a finite answer."""
    found = model.cache.get(_KEY)
    if found is None:
        table, base = model.features, valid_row(model)
        taken = []
        for name in table.names:
            columns = table.columns([{**base, name: None}], lambda i, f: f)
            if model.predictor.predict(columns).finite:
                taken.append(name)
        found = model.cache[_KEY] = frozenset(taken)
    return found
