"""The outcomes of archived records, for ``iabma audit-archive``: written to one Parquet
file as stored (so their digests can be checked against their outcome chain), read a
part at a time, and removed from the trail with their records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Engine

from app.audit.store.tables import outcomes, records

PART = 20_000
_I, _S, _B = pa.int64(), pa.string(), pa.binary()
SCHEMA = pa.schema(
    [
        ("id", _I), ("model", _S), ("request_id", _S), ("row_index", _I), ("record_id", _I),
        ("record_us", _I), ("version", _S), ("received_us", _I), ("outcome", _S),
        ("experts", _S), ("weights", _B), ("scores", _B), ("poster", _S), ("chain", _I),
        ("seq", _I),
    ]
)  # fmt: skip


def of_records(where: str) -> str:
    """The outcomes of the records ``where`` (SQL over the records' own values) selects."""
    return f"record_id IN (SELECT id FROM {records.name} WHERE {where})"


def write_outcomes(engine: Engine, where: str, path: Path) -> tuple[int, int]:
    """Write the outcomes of the records ``where`` selects to ``path``, in id order; how
    many, and the largest id among them (0 for none)."""
    sql = f"SELECT {', '.join(SCHEMA.names)} FROM {outcomes.name} WHERE {of_records(where)}"
    count = through = 0
    with engine.connect() as conn, pq.ParquetWriter(path, SCHEMA) as out:
        rows: Any = conn.execution_options(stream_results=True, yield_per=PART).exec_driver_sql(
            sql + " ORDER BY id"
        )
        for part in rows.partitions(PART):
            columns = zip(*[tuple(_plain(v) for v in r) for r in part], strict=True)
            arrays = [pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA, strict=True)]
            out.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA))
            count += len(part)
            through = max(through, int(part[-1][0]))
        if count == 0:
            out.write_table(SCHEMA.empty_table())
    return count, through


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value
