"""A fresh PostgreSQL schema per run for our audit trail, dropped afterwards."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


class PostgresUnavailable(RuntimeError):
    pass


def _connect() -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise PostgresUnavailable(
            f"PostgreSQL at {ADMIN_URL} is not reachable ({exc}); start it with "
            "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        ) from None


@contextmanager
def fresh_schema() -> Iterator[str]:
    """Yield an ``IABMA_AUDIT_URL`` whose search_path is a new, empty schema."""
    schema = f"bench_{secrets.token_hex(6)}"
    with _connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield (
            f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
        )
    finally:
        with _connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
