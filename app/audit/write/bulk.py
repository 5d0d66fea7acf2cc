"""The writer's statements: many rows in one INSERT, and a group's records with its chain
link in that same one statement (SQLite: through a TEMP view whose triggers split them;
PostgreSQL: the link's INSERT in a WITH).

CPython gives up the GIL for each statement and takes it back afterwards; behind an event
loop that is encoding an answer, each take waits up to the GIL's switch interval, and on
PostgreSQL each statement is also a round trip. So a group is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.audit.store.chain import LINK_COLUMNS, Link

# Rows per INSERT statement: well under SQLite's 32766 and PostgreSQL's 65535 parameters.
ROWS_PER_STATEMENT = 512

Statements = list[tuple[str, list[Any]]]


class BulkInsert:
    """``INSERT INTO t (...) VALUES (...), (...), ...``: one statement for many rows.

    ``executemany`` steps SQLite once per row, and CPython takes the GIL back between steps
    to bind the next row; behind a busy event loop each of those waits up to the GIL's
    switch interval. One statement per group releases the GIL once.
    """

    def __init__(
        self, table: str, columns: Sequence[str], param_marker: str, first: int = 1
    ) -> None:
        """``param_marker`` is ``?`` or ``%s``, or ``$`` for PostgreSQL's numbered
        parameters, ``$first`` onwards."""
        self.head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
        self.width, self.first = len(columns), first
        self.row = (
            None if param_marker == "$" else "(" + ", ".join([param_marker] * self.width) + ")"
        )
        self._sql: dict[int, str] = {}

    def sql(self, n: int) -> str:
        """The statement for ``n`` rows."""
        sql = self._sql.get(n)
        if sql is None:
            if self.row is not None:
                rows = [self.row] * n
            else:
                marks = [f"${i}" for i in range(self.first, self.first + n * self.width)]
                w = self.width
                rows = ["(" + ", ".join(marks[r * w : (r + 1) * w]) + ")" for r in range(n)]
            sql = self._sql[n] = self.head + ", ".join(rows)
        return sql

    def statements(self, rows: Sequence[Sequence[Any]]) -> Statements:
        out = []
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            out.append((self.sql(len(chunk)), [v for row in chunk for v in row]))
        return out


VIEW = "iabma_audit_commit"
_LINK_ONLY = ("digests", "prev", "mac")  # the link's columns a record has not


class ChainedInsert:
    """A group's records and its link as the rows of one INSERT into a TEMP view of this
    connection (``columns``: the records', ending with ``chain`` and ``seq``).

    The view has the record's columns and the link's others; a row with ``digests`` is the
    link, and goes to the links' table, the rest to the records'. As four statements
    (BEGIN, records, link, COMMIT) a group took the GIL back three times more (docs/design.md,
    "The writer's connection").
    """

    def __init__(self, records: str, links: str, columns: Sequence[str]) -> None:
        self.records, self.links = records, links
        self.columns = tuple(columns)
        self.view_columns = (*self.columns, *_LINK_ONLY)
        self._bulk = BulkInsert(VIEW, self.view_columns, "?")
        self._created_at = self.columns.index("created_us")

    def create(self, dbapi: Any) -> None:
        """Make the view and its triggers on this connection (TEMP: nothing in the file)."""
        names = ", ".join(self.view_columns)
        nulls = ", ".join(["NULL"] * len(self.view_columns))
        record = ", ".join(f"NEW.{c}" for c in self.columns)
        link = ", ".join(f"NEW.{c}" for c in LINK_COLUMNS)
        dbapi.execute(f"CREATE TEMP VIEW IF NOT EXISTS {VIEW} ({names}) AS SELECT {nulls}")
        dbapi.execute(
            f"CREATE TEMP TRIGGER IF NOT EXISTS {VIEW}_record INSTEAD OF INSERT ON {VIEW} "
            f"WHEN NEW.digests IS NULL BEGIN INSERT INTO {self.records} "
            f"({', '.join(self.columns)}) VALUES ({record}); END"
        )
        dbapi.execute(
            f"CREATE TEMP TRIGGER IF NOT EXISTS {VIEW}_link INSTEAD OF INSERT ON {VIEW} "
            f"WHEN NEW.digests IS NOT NULL BEGIN INSERT INTO {self.links} "
            f"({', '.join(LINK_COLUMNS)}) VALUES ({link}); END"
        )

    def statements(self, rows: Sequence[Sequence[Any]], link: Link) -> Statements:
        """The statement for ``rows`` (each without its ``chain`` and ``seq``, which the
        parameters add) and ``link``; more than one past :data:`ROWS_PER_STATEMENT`."""
        after = (link.chain, link.seq, *(None,) * len(_LINK_ONLY))
        last: list[Any] = [None] * len(self.columns)
        last[self._created_at] = link.created_us
        last[-2:] = link.chain, link.seq
        last += (link.digests, link.prev, link.mac)  # _LINK_ONLY's order
        n = len(rows) + 1
        out = []
        for start in range(0, n, ROWS_PER_STATEMENT):
            stop = min(start + ROWS_PER_STATEMENT, n)
            params: list[Any] = []
            for row in rows[start:stop]:
                params += row
                params += after
            if stop == n:
                params += last
            out.append((self._bulk.sql(stop - start), params))
        return out


class LinkedInsert:
    """PostgreSQL: a group's records and its link in one statement, the link's INSERT in a
    data-modifying ``WITH`` (autocommit makes the statement the transaction).

    In place of BEGIN, ``COPY``, the link's INSERT and COMMIT: four round trips a group, on
    which the writer waited for the server and then for the GIL.

    Its parameters are PostgreSQL's numbered ones (``$1``, ...), run by a raw cursor:
    psycopg parses a statement of more than 50 ``%s`` anew each time (docs/design.md, "The
    writer's connection").
    """

    def __init__(self, records: str, links: str, columns: Sequence[str]) -> None:
        marks = ", ".join(f"${i}" for i in range(1, len(LINK_COLUMNS) + 1))
        self._with = (
            f"WITH link AS (INSERT INTO {links} ({', '.join(LINK_COLUMNS)}) VALUES ({marks})) "
        )
        self._bulk = BulkInsert(records, columns, "$", first=len(LINK_COLUMNS) + 1)

    def statement(self, rows: Sequence[Sequence[Any]], link: Link) -> tuple[str, list[Any]] | None:
        """The statement, or None past :data:`ROWS_PER_STATEMENT` rows (``COPY`` then)."""
        if len(rows) > ROWS_PER_STATEMENT:
            return None
        [(sql, params)] = self._bulk.statements(rows)
        return self._with + sql, [*link.values(), *params]
