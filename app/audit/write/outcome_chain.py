"""Outcomes under the chain: each ``POST /feedback`` transaction appends, in the same
transaction, a link over the outcome rows it stores (:mod:`app.audit.store.chain`), so that an
outcome edited, deleted or inserted in the database is named by ``iabma audit-verify``.

An entry of an outcome link is the outcome's record id and its digest: an outcome may
leave only with its record (retention, the archive), and the verifier tells that apart
from a deletion by whether the record is still there. A process keeps a pool of chain
heads, one per transaction in flight (each transaction extends one chain, and a chain
is extended by one transaction at a time); a head whose commit failed in an unknown
state is dropped, and a new chain started, as the records' writer does.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, insert
from sqlalchemy.exc import IntegrityError

from app.audit.store.chain import LINK_COLUMNS, ChainHead, Link, entry, outcome_key, row_digest
from app.audit.store.records import now_us
from app.audit.store.tables import OUTCOMES, chains, outcome_links

# The stored columns an outcome's digest covers, in this order: what it says and who
# posted it. Its chain and place in it are the link's.
DIGESTED = (
    "model", "request_id", "row_index", "record_id", "record_us", "version", "received_us",
    "outcome", "experts", "weights", "scores", "poster",
)  # fmt: skip
RECORD_AT = DIGESTED.index("record_id")


def owner() -> str:
    """This process, as ``iabma_audit_chains.owner`` names the chains it starts."""
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def link_for(head: ChainHead, rows: Sequence[Sequence[Any]], created_us: int) -> Link:
    """The next link of ``head`` over outcome ``rows`` (their :data:`DIGESTED` values)."""
    return head.link_over(
        b"".join(entry(int(r[RECORD_AT]), row_digest(r)) for r in rows), created_us
    )


def insert_link(conn: Connection, link: Link) -> None:
    conn.execute(insert(outcome_links).values(dict(zip(LINK_COLUMNS, link.values(), strict=True))))


def start_chain(engine: Engine, key: bytes, who: str) -> ChainHead:
    """A new outcome chain, in a transaction of its own."""
    row = {"started_us": now_us(), "owner": who, "kind": OUTCOMES}
    with engine.begin() as conn:
        chain: int = conn.execute(insert(chains).values(row).returning(chains.c.id)).scalar_one()
    return ChainHead(key, int(chain))


class OutcomeChains:
    """This process's outcome chains: a head for each transaction, from a pool."""

    def __init__(self, chain_key: bytes, who: str | None = None) -> None:
        self.key = outcome_key(chain_key)
        self.owner = who or owner()
        self._free: list[ChainHead] = []
        self._lock = threading.Lock()

    @contextmanager
    def head(self, engine: Engine) -> Iterator[ChainHead]:
        """A head to extend in one transaction. It goes back to the pool when the block
        ends, or raises an :class:`IntegrityError` (its transaction rolled back, the head
        unmoved); any other failure may have left its commit unknown, and drops it."""
        with self._lock:
            head = self._free.pop() if self._free else None
        if head is None:
            head = start_chain(engine, self.key, self.owner)
        try:
            yield head
        except IntegrityError:
            self._give_back(head)
            raise
        self._give_back(head)

    def _give_back(self, head: ChainHead) -> None:
        with self._lock:
            self._free.append(head)
