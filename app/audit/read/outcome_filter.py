"""Which outcomes a report or a refit reads: a model's, whose predictions were served in
a window (by a version), less those of the posters excluded; and their scores.

A poster is named as :func:`app.core.feedback.poster_of` names it (``key:`` and 12 hex
digits of a keyed fingerprint); outcomes posted where the route takes no key have none,
and are named :data:`ANONYMOUS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, or_, select

from app.audit.store.tables import outcomes

ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class OutcomeFilter:
    """``model``'s outcomes of predictions served in ``[since_us, until_us)``, by
    ``version`` if given, less those posted by any of ``exclude_posters``."""

    model: str
    since_us: int | None = None
    until_us: int | None = None
    version: str | None = None
    exclude_posters: tuple[str, ...] = ()

    def conditions(self) -> list[Any]:
        c = outcomes.c
        found = [c.model == self.model]
        if self.since_us is not None:
            found.append(c.record_us >= self.since_us)
        if self.until_us is not None:
            found.append(c.record_us < self.until_us)
        if self.version is not None:
            found.append(c.version == self.version)
        keys = sorted({p for p in self.exclude_posters if p != ANONYMOUS})
        if ANONYMOUS in self.exclude_posters:
            found.append(c.poster.is_not(None))
            if keys:
                found.append(c.poster.not_in(keys))
        elif keys:
            found.append(or_(c.poster.is_(None), c.poster.not_in(keys)))
        return found


def window(
    model: str,
    since_us: int | None,
    until_us: int | None,
    version: str | None,
    exclude_posters: Sequence[str] = (),
) -> list[Any]:
    """The conditions on ``outcomes`` of :class:`OutcomeFilter`."""
    return OutcomeFilter(model, since_us, until_us, version, tuple(exclude_posters)).conditions()


def scored(engine: Engine, flt: OutcomeFilter) -> list[tuple[Any, ...]]:
    """``(record_us, experts, weights, scores, poster, outcome)`` of every outcome ``flt``
    selects, oldest first, as stored (a reader checks them: :mod:`app.core.performance`)."""
    c = outcomes.c
    query = select(c.record_us, c.experts, c.weights, c.scores, c.poster, c.outcome)
    with engine.connect() as conn:
        rows = conn.execute(query.where(*flt.conditions()).order_by(c.record_us)).cursor.fetchall()
    return list(rows)
