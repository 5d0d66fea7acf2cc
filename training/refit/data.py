"""The outcome rows a refit learns from, with their inputs, and what it refuses.

Inputs come from the trail when it kept them (``IABMA_AUDIT_PAYLOAD=full``); otherwise
from a CSV of the requests as they were sent, joined by request id and accepted only where
each request's rows hash to the trail's keyed hash. Every refusal is one line
(:class:`RefitRefused`) naming what is missing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from app.audit.read.labelled import LabelledRow, RecordInput, input_hmac
from app.audit.read.outcome_filter import ANONYMOUS
from app.bundle.manifest import Manifest
from training.errors import IABMAError, ParameterError

# The gate's search holds out a fifth of the fitting rows, and the comparison a fifth of
# all: below this the held-out NLL's standard error is as large as the gains a refit finds.
MIN_ROWS = 200
# A poster as outcomes name it (app.core.feedback.poster_of), or ANONYMOUS.
_POSTER = re.compile(r"key:[0-9a-f]{12}")


class RefitRefused(IABMAError):
    """Data a refit cannot use; the message is one line and names what is missing."""


@dataclass(frozen=True)
class OutcomeRows:
    """Raw inputs ``X`` (the user's column names), the outcomes ``y`` and when each row
    was served, oldest first."""

    X: pd.DataFrame
    y: np.ndarray
    record_us: np.ndarray
    versions: tuple[str, ...]


def check_posters(posters: Sequence[str]) -> tuple[str, ...]:
    """``--exclude-poster`` values: as ``GET /performance`` lists them, each once."""
    for p in posters:
        if p != ANONYMOUS and not _POSTER.fullmatch(p):
            raise ParameterError(
                "--exclude-poster", p, f"is not a poster: give one as GET /performance lists "
                f"them (key: and 12 hex digits, or {ANONYMOUS})"
            )  # fmt: skip
    return tuple(dict.fromkeys(posters))


def check_rows(rows: Sequence[LabelledRow], manifest: Manifest, min_rows: int = MIN_ROWS) -> None:
    """Refuse too few rows, and rows that versions with other experts served."""
    if len(rows) < min_rows:
        raise RefitRefused(
            f"too few outcome rows: {len(rows)} in the window, a refit needs at least {min_rows}"
        )
    ours = tuple(manifest.expert_names)
    other = sorted({(r.version, r.experts) for r in rows if r.experts != ours})
    if other:
        version, experts = other[0]
        raise RefitRefused(
            f"{sum(r.experts != ours for r in rows)} outcome rows were served by versions with "
            f"other experts ({version}: {', '.join(experts)}; this bundle: {', '.join(ours)}); "
            "narrow the window with --since/--until"
        )


def from_trail(rows: Sequence[LabelledRow], inputs: dict[int, RecordInput]) -> OutcomeRows:
    """The rows' inputs as the trail kept them; refuses when it kept none."""
    bare = [r for r in rows if inputs[r.record_id].instances is None]
    if bare:
        mode = inputs[bare[0].record_id].mode
        raise RefitRefused(
            f"the trail keeps no inputs for {len(bare)} of {len(rows)} outcome rows (audit "
            f"payload mode {mode!r}); give them with --csv FILE --id-column COLUMN"
        )
    instances = [_instances(inputs[r.record_id])[r.row] for r in rows]
    return _rows(rows, pd.DataFrame.from_records(instances))


def from_csv(
    rows: Sequence[LabelledRow],
    inputs: dict[int, RecordInput],
    path: Path,
    id_column: str,
    key: bytes,
) -> OutcomeRows:
    """Inputs from ``path``: each request's rows in the order sent, its id in
    ``id_column``; every request must hash to the trail's keyed hash."""
    try:
        frame = pd.read_csv(path, dtype={id_column: str})
    except (OSError, ValueError) as exc:
        raise RefitRefused(f"--csv={str(path)!r} cannot be read: {exc}") from None
    if id_column not in frame.columns:
        raise RefitRefused(f"--id-column={id_column!r} is not a column of {path}")
    groups = {str(k): g.drop(columns=[id_column]) for k, g in frame.groupby(id_column, sort=False)}
    by_record: dict[int, list[dict[str, Any]]] = {}
    mismatched: list[str] = []
    for record_id in dict.fromkeys(r.record_id for r in rows):
        kept = inputs[record_id]
        if kept.instances is not None:
            by_record[record_id] = kept.instances
            continue
        if kept.mode == "off":
            raise RefitRefused(
                f"the trail keeps neither the inputs nor their hash of request "
                f"{kept.request_id!r} (audit payload mode 'off'): --csv cannot be checked"
            )
        sent = groups.get(kept.request_id)
        if sent is None:
            raise RefitRefused(f"--csv={str(path)!r} has no rows for request {kept.request_id!r}")
        instances = [_json_row(rec) for rec in sent.to_dict(orient="records")]
        if kept.hmac_sha256 is None or input_hmac(key, instances) != kept.hmac_sha256:
            mismatched.append(kept.request_id)
        by_record[record_id] = instances
    if mismatched:
        raise RefitRefused(
            f"--csv={str(path)!r}: the rows of {len(mismatched)} of {len(by_record)} requests "
            f"do not match the trail's keyed hash (first: request {mismatched[0]!r}); the "
            "file must hold each request's rows exactly as sent, in order"
        )
    frame_rows = [by_record[r.record_id][r.row] for r in rows]
    return _rows(rows, pd.DataFrame.from_records(frame_rows))


def _instances(kept: RecordInput) -> list[dict[str, Any]]:
    assert kept.instances is not None
    return kept.instances


def _json_row(rec: dict[str, Any]) -> dict[str, Any]:
    """A CSV row as the client sent it in JSON: missing cells null, numpy scalars plain."""
    out: dict[str, Any] = {}
    for k, v in rec.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and math.isnan(v):
            v = None
        out[str(k)] = v
    return out


def _rows(rows: Sequence[LabelledRow], X: pd.DataFrame) -> OutcomeRows:
    return OutcomeRows(
        X=X,
        y=np.array([r.outcome for r in rows], dtype=object),
        record_us=np.array([r.record_us for r in rows], dtype=np.int64),
        versions=tuple(sorted({r.version for r in rows})),
    )
