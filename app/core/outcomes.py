"""Reading an outcome as its record's task says: a class of that record (as the label was
served, or as its text, read like a category), or a number (or its text, read like a
numeric feature); never NaN or Infinity. Each reading gives the canonical JSON of the
outcome, so that a repeat reads the same text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from app.audit.scores import Served
from app.bundle.normalise import CategoryMap, Normaliser, json_repr
from app.core.inputs import NonFinite, json_type
from app.errors import Fault


@dataclass(frozen=True)
class Classes:
    """One record's classes, and how an outcome is read as one of them."""

    labels: list[Any]
    categories: CategoryMap
    exact: dict[tuple[type, Any], tuple[float, str]]  # a label as served or as its text

    @classmethod
    def of(cls, text: str, rule: Normaliser) -> Classes:
        labels = json.loads(text)
        exact: dict[tuple[type, Any], tuple[float, str]] = {}
        for k, label in enumerate(labels):
            read = (float(k), json.dumps(label))
            exact[(type(label), label)] = exact[(str, str(label))] = read
        return cls(labels, CategoryMap(tuple(map(str, labels)), rule), exact)


def read_outcome(
    rec: Served, raw: Any, rule: Normaliser, known: dict[str, Classes]
) -> tuple[float, str] | Fault:
    """``(class index or number, canonical JSON)``, or what is wrong with ``raw``."""
    if isinstance(raw, NonFinite):
        return Fault("non_finite", "", f"{raw.token} is not an outcome; send a finite value")
    if rec.task == "classification":
        assert rec.classes is not None
        found = known.get(rec.classes)
        if found is None:
            found = known[rec.classes] = Classes.of(rec.classes, rule)
        hit = found.exact.get((type(raw), raw)) if type(raw) in (int, str) else None
        if hit is not None:
            return hit
        categories, classes = found.categories, found.labels
        key, problem = categories.lookup(raw)
        if key is None and problem is None:
            return Fault("missing_value", "", "missing; an outcome is one of the classes")
        if problem is not None:
            near = categories.near(raw)
            hint = f"; did you mean {json_repr(near)}?" if near is not None else ""
            return Fault(
                "unknown_class",
                "",
                f"{json_type(raw)} is not a class of this model{hint}; classes: "
                f"{categories.shown()}",
            )
        index = categories.categories.index(key)
        return float(index), json.dumps(classes[index])
    number, problem = rule.number(raw)
    if problem is not None:
        return Fault("wrong_type", "", f"expected a number, got {json_repr(raw)}")
    if number is None:
        return Fault("missing_value", "", "missing; an outcome is the observed number")
    if not math.isfinite(number):
        return Fault("non_finite", "", f"{json_repr(raw)} is not a finite number")
    return number, json.dumps(number)
