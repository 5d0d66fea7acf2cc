"""A group commit where one record's fault fails that record alone: duplicate request ids
are looked up and refused, any other row fault is found by halving the group, and a fault
of the database itself still fails the whole group. On PostgreSQL each attempt inserts in
key order. Why and what it costs: docs/design.md, "Audit trail".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Row = Sequence[Any]
Refused = dict[int, Exception]  # by the row's place in the group
# Writes the rows given in one attempt (nothing written if it raises).
Write = Callable[[Sequence[Row]], None]
# Of the keys given, those the trail holds already.
Taken = Callable[[list[tuple[bytes, int]]], set[tuple[bytes, int]]]


class DuplicateId(Exception):
    """The trail holds a record of this model under this request id already (or the group
    does, queued earlier)."""


def is_row_fault(exc: BaseException) -> bool:
    """Whether the database refused a row (a constraint, a value out of range) rather than
    failed: the statement then wrote nothing, and the connection is fine.

    sqlite3 and psycopg both name these classes so; sqlite3 refuses an integer beyond 64
    bits with OverflowError before running anything.
    """
    if isinstance(exc, OverflowError):
        return True
    return any(c.__name__ in ("IntegrityError", "DataError") for c in type(exc).__mro__)


class Apart:
    """Writes a group so that a refused row fails alone. ``key_at`` is where a row holds
    its request id and model id (None: no key, as in a migration); ``ordered`` sorts each
    attempt's rows by that key (PostgreSQL)."""

    def __init__(self, key_at: tuple[int, int] | None, ordered: bool) -> None:
        self.key_at = key_at
        self.ordered = ordered

    def write(self, rows: Sequence[Row], write: Write, taken: Taken) -> Refused:
        """Write ``rows``; those refused, by place. Raises what a whole group's failure
        raises: a database fault, or a row fault when no row could be written."""
        refused: Refused = {}
        n = len(rows)
        at = list(range(n))
        keys: list[tuple[bytes, int]] = []
        if self.key_at is not None and n > 1:
            rid, model = self.key_at
            keys = [(row[rid], row[model]) for row in rows]
            # Each key's first place: set last from the end, the first place wins.
            first = dict(zip(reversed(keys), reversed(at), strict=True))
            if len(first) < n:
                refused = {k: DuplicateId() for k in at if first[keys[k]] != k}
                at = sorted(first.values())
            if self.ordered:
                at.sort(key=keys.__getitem__)
        elif self.key_at is not None:
            rid, model = self.key_at
            keys = [(rows[0][rid], rows[0][model])]
        written = self._each(rows, keys, at, write, taken, refused)
        if not written:
            faults = [e for e in refused.values() if not isinstance(e, DuplicateId)]
            if faults:
                raise faults[0]
        return refused

    def _each(self, rows: Sequence[Row], keys: list[tuple[bytes, int]], at: list[int],
              write: Write, taken: Taken, refused: Refused) -> int:  # fmt: skip
        """Write ``rows[at]``, apart from those refused; how many were written."""
        fault: Exception | None = None
        while at:
            try:
                write(rows if len(at) == len(rows) and not refused and not self.ordered
                      else [rows[k] for k in at])  # fmt: skip
                return len(at)
            except Exception as exc:
                if not is_row_fault(exc):
                    raise
                fault = exc
            held = taken([keys[k] for k in at]) if keys else set()
            if not held:
                break
            # Another replica may commit one of the rest meanwhile: then once more.
            for k in at:
                if keys[k] in held:
                    refused[k] = DuplicateId()
            at = [k for k in at if k not in refused]
        if not at or fault is None:
            return 0
        if len(at) == 1:
            refused[at[0]] = fault
            return 0
        half = len(at) // 2
        return self._each(rows, keys, at[:half], write, taken, refused) + self._each(
            rows, keys, at[half:], write, taken, refused
        )
