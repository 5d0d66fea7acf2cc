"""``iabma refit --since auto``: the time of the change point of the mixture's realised
NLL over the window's outcomes, found as ``GET /performance`` finds it
(:mod:`app.audit.read.change_point`)."""

from __future__ import annotations

from typing import Any

from app.audit.read.change_point import P_VALUE, trail_change_point
from app.audit.read.outcome_filter import OutcomeFilter
from app.audit.store.records import iso_from_us
from training.errors import ParameterError


def auto_since(engine: Any, name: str, until: int | None, posters: tuple[str, ...]) -> int:
    """The served time of the first row after the change (the rows up to ``until``, less
    the ``posters``'); prints the change; without one, a ParameterError on --since."""
    rows, point = trail_change_point(engine, OutcomeFilter(name, None, until, None, posters))
    if point is None:
        raise ParameterError(
            "--since",
            "auto",
            f"found no change in the realised NLL of {rows:,} outcome rows (CUSUM, p < "
            f"{P_VALUE:g}, at least 30 rows on each side); give a time",
        )
    at = int(point["served_at_us"])
    print(
        f"change point: {point['rows_before']:,} outcome rows at NLL {point['nll_before']:.4f}, "
        f"then {point['rows_after']:,} at {point['nll_after']:.4f} (p = {point['p_value']:.2g}); "
        f"--since {iso_from_us(at)}"
    )
    return at
