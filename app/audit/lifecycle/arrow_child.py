"""The process that reads a SQLite trail for the archive (:mod:`app.audit.lifecycle.arrow_read`).

``python -P app/audit/lifecycle/arrow_child.py PATH ROWS`` runs the query on stdin through ADBC's
SQLite driver and writes the rows to stdout as an Arrow stream, in batches of ROWS; on a
failure, one line to stderr and exit status 1. It imports nothing of the app's, and not
ADBC's DB-API (which imports pandas): it starts in about 0.1 s.

It reads at the lowest CPU priority. Reading beside the archive's writing, it takes a
core of its own; on a machine that also serves, that core is the server's, whose p99
rose tenfold. On a core nobody else wants, the niceness costs it nothing.
"""

from __future__ import annotations

import os
import sys
from contextlib import closing

import adbc_driver_manager
import adbc_driver_sqlite
import pyarrow as pa


def main(path: str, rows: int, sql: str) -> None:
    with (
        closing(adbc_driver_sqlite.connect(path)) as db,
        closing(adbc_driver_manager.AdbcConnection(db)) as conn,
        closing(adbc_driver_manager.AdbcStatement(conn)) as stmt,
    ):
        stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(rows)})
        stmt.set_sql_query(sql)
        stream, _ = stmt.execute_query()
        reader = pa.RecordBatchReader.from_stream(stream)
        with pa.ipc.new_stream(sys.stdout.buffer, reader.schema) as out:
            for batch in reader:
                out.write_batch(batch)


if __name__ == "__main__":
    os.nice(19)  # see above
    try:
        main(sys.argv[1], int(sys.argv[2]), sys.stdin.read())
    except Exception as exc:  # one line for the parent; ADBC's messages go on with the query
        sys.stderr.write((str(exc).splitlines() or [type(exc).__name__])[0] + "\n")
        sys.exit(1)
