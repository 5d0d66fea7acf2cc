"""Reading records out of the trail as Arrow columns, through ADBC, for the archive.

The drivers build Arrow arrays in C (PostgreSQL by ``COPY ... (FORMAT binary)``): through
a DBAPI cursor, Python built a tuple per record and the archive spent 43% of its time
there (1.43 s against 0.38 s for 500,000 records on SQLite).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import closing
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from app.audit.archive_table import STORED, STORED_SCHEMA
from app.audit.tables import records

# SQLite's driver types a column by the values of the first batch, and a column whose
# first values are all NULL becomes int64, failing at its first text. So on SQLite each
# column is cast to its type, and a nullable one comes as its value or an empty one, with
# a flag that puts the NULL back.
_SQLITE_TYPE = {pa.int64(): "INTEGER", pa.binary(): "BLOB", pa.string(): "TEXT"}
_EMPTY = {pa.binary(): "X''", pa.string(): "''"}
_NULLABLE = ("input_hash", "input_json")


def _sqlite_columns() -> list[str]:
    out = []
    for f in STORED_SCHEMA:
        kind = _SQLITE_TYPE[f.type]
        if f.name in _NULLABLE:
            out.append(f"CAST(COALESCE({f.name}, {_EMPTY[f.type]}) AS {kind}) AS {f.name}")
            out.append(f"{f.name} IS NULL AS {f.name}_null")
        else:
            out.append(f"CAST({f.name} AS {kind}) AS {f.name}")
    return out


def _connect(engine: Engine) -> Any:
    """An ADBC connection to the trail ``engine`` reaches."""
    url = engine.url
    if engine.dialect.name == "sqlite":
        import adbc_driver_sqlite.dbapi

        return adbc_driver_sqlite.dbapi.connect(url.database)
    import adbc_driver_postgresql.dbapi

    # libpq's own URI: the same host, database and options (a search_path, say).
    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    return adbc_driver_postgresql.dbapi.connect(plain)


def _as_stored(table: pa.Table) -> pa.Table:
    columns = []
    for f in STORED_SCHEMA:
        col = table.column(f.name)
        if f"{f.name}_null" in table.column_names:
            flag = pc.equal(table.column(f"{f.name}_null"), 1)
            col = pc.if_else(flag, pa.scalar(None, f.type), col)
        columns.append(col.cast(f.type))
    return pa.table(columns, schema=STORED_SCHEMA)


def stored_parts(engine: Engine, where: str, size: int) -> Generator[pa.Table, None, None]:
    """The records matching ``where`` (SQL over the trail's own values), in time order,
    as tables of :data:`~app.audit.archive_table.STORED_SCHEMA` of about ``size`` rows."""
    sqlite = engine.dialect.name == "sqlite"
    columns = _sqlite_columns() if sqlite else list(STORED)
    sql = f"SELECT {', '.join(columns)} FROM {records.name} WHERE {where} ORDER BY created_us"
    with closing(_connect(engine)) as conn, closing(conn.cursor()) as cursor:
        if sqlite:
            cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(size)})
        cursor.execute(sql)
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in cursor.fetch_record_batch():
            pending.append(batch)
            rows += batch.num_rows
            if rows >= size:
                yield _as_stored(pa.Table.from_batches(pending))
                pending, rows = [], 0
        if rows:
            yield _as_stored(pa.Table.from_batches(pending))
