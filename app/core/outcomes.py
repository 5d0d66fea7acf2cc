"""Reading an outcome as its record's task says: a class of that record (as the label was
served, or as its text, read like a category), or a number (or its text, read like a
numeric feature) inside the range the model's outcomes may take. Each reading gives the
canonical JSON of the outcome, so that a repeat reads the same text.

The range (:func:`outcome_range`) is the training target's, widened on each side by
:data:`RANGE_WIDTHS` times its width: wide enough for any outcome of the world the model
was trained on, narrow enough that every score of it is a finite number (an outcome of
1e300 would make an NLL and a squared error infinite, and every report over it with them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from app.audit.read.scores import Served
from app.bundle.manifest import TargetSpec
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


RANGE_WIDTHS = 10.0
# A bundle exported without the target's range: its mean, give or take this many scales.
NO_RANGE_SCALES = 1000.0


@dataclass(frozen=True)
class OutcomeRange:
    """The numbers a regression outcome may be: ``[low, high]``, from the training
    target's ``[seen_low, seen_high]``."""

    low: float
    high: float
    seen_low: float
    seen_high: float

    def refusal(self, number: float) -> str | None:
        if self.low <= number <= self.high:
            return None
        return (
            f"{number:.6g} is outside the range of this model's outcomes, {self.low:.6g} to "
            f"{self.high:.6g} (the training target's range, {self.seen_low:.6g} to "
            f"{self.seen_high:.6g}, widened by {RANGE_WIDTHS:g} times its width on each side)"
        )


def outcome_range(target: TargetSpec) -> OutcomeRange | None:
    """The range a regression outcome of ``target`` may take (None for classification)."""
    if target.mean is None or target.scale is None:
        return None
    mean, scale = target.mean, target.scale
    if target.low is None or target.high is None:
        lo = hi = mean
        width = NO_RANGE_SCALES * scale / RANGE_WIDTHS
    else:
        lo, hi = mean + scale * target.low, mean + scale * target.high
        width = max(hi - lo, scale)  # a constant target still has its scale
    return OutcomeRange(lo - RANGE_WIDTHS * width, hi + RANGE_WIDTHS * width, lo, hi)


def read_outcome(
    rec: Served,
    raw: Any,
    rule: Normaliser,
    known: dict[str, Classes],
    bounds: OutcomeRange | None = None,
) -> tuple[float, str] | Fault:
    """``(class index or number, canonical JSON)``, or what is wrong with ``raw``; a
    number outside ``bounds`` is refused, naming them."""
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
    refused = bounds.refusal(number) if bounds is not None else None
    if refused is not None:
        return Fault("out_of_range", "", refused)
    return number, json.dumps(number)
