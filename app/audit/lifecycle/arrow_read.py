"""Reading records out of the trail as Arrow columns, through ADBC, for the archive:
PostgreSQL's here, SQLite's in a child process (:mod:`app.audit.lifecycle.arrow_child`).

The drivers build Arrow arrays in C (PostgreSQL by ``COPY ... (FORMAT binary)``); through
a DBAPI cursor, Python built a tuple per record, the archive's largest cost.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Generator
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from app.audit.lifecycle.archive_table import STORED, STORED_SCHEMA
from app.audit.store.tables import records

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


Batches = Generator[pa.RecordBatch, None, None]


def _postgres_batches(engine: Engine, sql: str) -> Batches:
    import adbc_driver_manager
    import adbc_driver_postgresql

    # libpq's own URI: the same host, database and options (a search_path, say).
    plain = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with (
        closing(adbc_driver_postgresql.connect(plain)) as db,
        closing(adbc_driver_manager.AdbcConnection(db)) as conn,
        closing(adbc_driver_manager.AdbcStatement(conn)) as stmt,
    ):
        stmt.set_sql_query(sql)
        stream, _ = stmt.execute_query()
        yield from pa.RecordBatchReader.from_stream(stream)


def _sqlite_batches(path: str, sql: str, size: int) -> Batches:
    """Read in a child process, whose batches come back as an Arrow stream on a pipe.

    The ADBC driver links its own copy of SQLite. Two copies in one process do not see
    each other's POSIX locks, and closing a file in one drops the other's locks on it
    (SQLite's "How To Corrupt Your Database Files", 2.2.1), while this process's engine
    has the same file open. A process of its own is one more reader, as SQLite expects.
    """
    # The file itself, and -P: nothing on the path from the working directory (the
    # image's is /app), and the child imports nothing of the app's.
    argv = [sys.executable, "-P", str(Path(__file__).with_name("arrow_child.py")), path, str(size)]
    pipe = subprocess.PIPE
    with subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe) as child:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        child.stdin.write(sql.encode("utf-8"))
        child.stdin.close()
        broken = None
        try:
            yield from pa.ipc.open_stream(child.stdout)
        except pa.ArrowInvalid as exc:  # the child stopped: its reason is on stderr
            broken = exc
        except BaseException:  # closed early, or failed here: the child is not needed
            child.kill()
            raise
        said = child.stderr.read().decode("utf-8", "replace").strip()
        if child.wait() != 0:
            last = said.splitlines()[-1] if said else f"exit status {child.returncode}"
            raise RuntimeError(f"reading the SQLite trail {path} failed: {last}")
        if broken is not None:
            raise broken


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
    as tables of :data:`~app.audit.lifecycle.archive_table.STORED_SCHEMA` of about ``size`` rows."""
    sqlite = engine.dialect.name == "sqlite"
    columns = _sqlite_columns() if sqlite else list(STORED)
    sql = f"SELECT {', '.join(columns)} FROM {records.name} WHERE {where} ORDER BY created_us"
    if sqlite:
        assert engine.url.database  # app.settings refuses in-memory trails
        batches = _sqlite_batches(engine.url.database, sql, size)
    else:
        batches = _postgres_batches(engine, sql)
    with closing(batches):
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            pending.append(batch)
            rows += batch.num_rows
            if rows >= size:
                yield _as_stored(pa.Table.from_batches(pending))
                pending, rows = [], 0
        if rows:
            yield _as_stored(pa.Table.from_batches(pending))
