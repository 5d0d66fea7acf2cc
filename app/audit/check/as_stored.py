"""The trail's rows as the database holds them, for ``iabma audit-verify``: read in
bulk and leniently (a value of any type comes back as what it is, never as an error),
shown readably in findings, and the version rows checked against their MACs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, select

from app.audit.store.chain import version_mac
from app.audit.store.packing import unpack_request_id
from app.audit.store.tables import versions
from app.audit.store.version_rows import KEY_COLUMNS


def shown_id(raw: Any) -> str:
    """A request id as stored, readable whatever it holds."""
    if isinstance(raw, bytes | memoryview):
        try:
            return repr(unpack_request_id(bytes(raw)))
        except UnicodeDecodeError:
            return f"0x{bytes(raw).hex()} (not UTF-8)"
    if raw is None:
        return "NULL"
    kind = "text" if isinstance(raw, str) else type(raw).__name__
    return f"{raw!r:.80} (stored as {kind})"


@contextmanager
def raw_rows(conn: Connection, sql: str, name: str) -> Iterator[Any]:
    """A DBAPI cursor over ``sql``, streamed (PostgreSQL: a server-side cursor, bytea as
    its bytes); SQLite's text read leniently (bytes not UTF-8 kept as surrogates), so a
    blob turned into text reads as a value that differs, not as an error."""
    raw: Any = conn.connection.dbapi_connection
    postgres = conn.dialect.name == "postgresql"
    if postgres:
        cursor = raw.cursor(name=name, binary=True)
    else:
        factory = raw.text_factory
        raw.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        cursor = raw.cursor()
    try:
        cursor.execute(sql)
        yield cursor
    finally:
        cursor.close()
        if not postgres:
            raw.text_factory = factory


def check_versions(engine: Engine, key: bytes, findings: list[Any]) -> set[Any]:
    """Every version row against its MAC; the ids of those found."""
    c = versions.c
    ids: set[Any] = set()
    with (
        engine.connect() as conn,
        raw_rows(
            conn, str(select(c.id, *[c[k] for k in KEY_COLUMNS], c.mac)), "iabma_verify_versions"
        ) as cursor,
    ):
        for row in cursor.fetchall():
            ids.add(row[0])
            values, mac = tuple(row[1:-1]), row[-1]
            shown = f"version row id {row[0]} ({', '.join(repr(v)[:60] for v in values[:3])})"
            if mac is None:
                findings.append(f"altered: {shown} carries no MAC (not written by the server)")
            elif type(row[0]) is not int or version_mac(key, row[0], values) != bytes(mac):
                findings.append(f"altered: {shown} is not as the server wrote it")
    return ids
