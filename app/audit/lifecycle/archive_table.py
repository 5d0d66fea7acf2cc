"""The Arrow tables of an archive file (:mod:`app.audit.lifecycle.archive`), built a column at a
time: the records as stored, with fixed types, and the readable columns beside them.

Nothing here loops over records in Python: at a million records, a Python step per record
per column cost more than reading and deleting them (issue 30's 100,000 records/s).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.audit.store.packing import unpack_request_id
from app.audit.store.records import LOG_COLUMNS
from app.audit.store.version_rows import ReaderVersions

STORED = ("id", "chain", "seq", *LOG_COLUMNS)
_INT = pa.int64()
# Fixed, so that the parts of one file read in several fetches concatenate (a part whose
# input_json is all null would otherwise be typed null, another's string).
STORED_SCHEMA = pa.schema(
    [
        ("id", _INT), ("chain", _INT), ("seq", _INT), ("request_id", pa.binary()),
        ("created_us", _INT), ("version_id", _INT), ("n_instances", _INT), ("top", _INT),
        ("latency_us", _INT), ("input_hash", pa.binary()), ("input_json", pa.string()),
        ("answer", pa.binary()),
    ]
)  # fmt: skip
assert tuple(STORED_SCHEMA.names) == STORED
_HEX_BYTES = 16  # app.audit.store.packing.pack_request_id: the server's own ids, packed
_TEXT_MARK = 0xFF


def request_text(raw: pa.Array) -> pa.Array:
    """:func:`app.audit.store.packing.unpack_request_id` of each value, vectorised: 16 bytes as
    32 hex digits, any other as its UTF-8 (less the mark of a 16-byte text id)."""
    lengths = pc.binary_length(raw).to_numpy(zero_copy_only=False)
    packed = np.flatnonzero(lengths == _HEX_BYTES)
    text = np.flatnonzero(lengths != _HEX_BYTES)
    parts, order = [], []
    if len(packed):
        ids = raw.take(pa.array(packed))
        data = ids.buffers()[2]
        # A fresh take is contiguous: 16 bytes a value from the first value's offset on.
        start = int(np.frombuffer(ids.buffers()[1], np.int32)[ids.offset])
        hexed = memoryview(data)[start : start + _HEX_BYTES * len(ids)].hex().encode()
        step = 2 * _HEX_BYTES
        offsets = np.arange(0, step * len(ids) + 1, step, dtype=np.int32)
        strings = pa.StringArray.from_buffers(len(ids), pa.py_buffer(offsets), pa.py_buffer(hexed))
        parts.append(strings)
        order.append(packed)
    if len(text):
        ids = raw.take(pa.array(text))
        marked = lengths[text] == _HEX_BYTES + 1
        if marked.any():  # rare: a client's 16-byte id; the codec's own rule
            parts.append(pa.array([unpack_request_id(r) for r in ids.to_pylist()], pa.string()))
        else:
            parts.append(ids.cast(pa.string()))
        order.append(text)
    if not parts:
        return pa.array([], pa.string())
    joined = pa.concat_arrays(parts)
    if len(parts) == 1:
        return joined
    return joined.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


def with_readable(stored: pa.Table, versions: ReaderVersions) -> pa.Table:
    """``stored`` with the readable columns before it: the request id as text, the time,
    the version's names, the top expert's name and the latency in ms."""
    vid = stored.column("version_id").to_numpy()
    ids = np.unique(vid)
    vs = [versions.get(int(v)) for v in ids]
    at = pa.array(np.searchsorted(ids, vid))  # each record's place in ``vs``

    def per_version(values: list[Any]) -> pa.Array:
        return pa.array(values, pa.string()).take(at)

    names = [v.expert_names for v in vs]
    first = np.cumsum([0, *(len(n) for n in names[:-1])])
    top = first[at.to_numpy()] + stored.column("top").to_numpy()
    micros = stored.column("latency_us").cast(pa.float64())
    readable = {
        "request": request_text(stored.column("request_id").combine_chunks()),
        "time": stored.column("created_us").cast(pa.timestamp("us", tz="UTC")),
        "model": per_version([v.model for v in vs]),
        "version": per_version([v.version for v in vs]),
        "route": per_version([v.route for v in vs]),
        "top_expert": pa.array([n for ns in names for n in ns], pa.string()).take(pa.array(top)),
        "latency_ms": pc.divide(micros, 1000.0),
        "experts": per_version([v.experts for v in vs]),
        "classes": per_version([v.classes for v in vs]),
    }
    columns = {**readable, **{name: stored.column(name) for name in STORED}}
    return pa.table(columns)
