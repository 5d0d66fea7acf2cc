"""What a request is answered when its own record is refused while the rest of its group
commits (:mod:`app.audit.write.apart`): 409 for a request id its model's records hold already,
500 for a record the server could not build or the database would not take (a fault of
the server's, logged with its cause).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from app.audit.store.records import AuditRecord
from app.audit.write.apart import DuplicateId, Refused
from app.audit.write.group_rows import Built
from app.errors import DuplicateRequest, InternalError

log = logging.getLogger("iabma.audit")


def built_rows(
    records: Sequence[AuditRecord], rows: Sequence[Built]
) -> tuple[list[int], list[tuple[Any, ...]], Refused]:
    """The places and rows of the records whose row was built, and the answers of those
    whose was not."""
    places, built = [], []
    refused: Refused = {}
    for k, row in enumerate(rows):
        if isinstance(row, Exception):
            refused[k] = unwritable(records[k], row, "could not be built")
        else:
            places.append(k)
            built.append(row)
    return places, built, refused


def answer(rec: AuditRecord, fault: Exception) -> Exception:
    """The answer of a request whose record the database refused."""
    if isinstance(fault, DuplicateId):
        return DuplicateRequest(
            f"request id {rec.request_id!r} already names an audited prediction of model "
            f"{rec.model!r}; send each prediction under an id of its own (GET "
            "/weights?request_id= reads the earlier one)",
            field="header X-Request-ID",
        )
    return unwritable(rec, fault, "was refused by the database")


def unwritable(rec: AuditRecord, fault: Exception, what: str) -> InternalError:
    log.error("audit: the record of request %r %s", rec.request_id, what, exc_info=fault)
    return InternalError(
        f"the audit record of this request {what}; nothing was recorded (the server log has "
        "the details)",
        field="audit",
    )
