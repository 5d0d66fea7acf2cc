"""The served and the staged version compared on the same outcome rows, paired.

Every outcome row whose request was shadowed (:mod:`app.audit.shadow_table`) has two
NLLs: the served mixture's, as ``iabma_outcomes`` stored it at ingest, and the staged
mixture's, from the staged weights and mixture its shadow row kept. Their difference
(staged minus served: negative when the staged version is better) is averaged, with the
paired standard error ``sd / sqrt(rows)``. The staged weights of every shadowed row also
give its weight drift (PSI) against the staged version's own training histogram.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine, select

from app.audit.records import iso_from_us
from app.audit.scores import KINDS, NLL_CAP, TINY
from app.audit.shadow_table import exists, shadow
from app.audit.tables import outcomes
from app.bundle.drift import psi, weight_counts
from app.bundle.manifest import Manifest
from app.bundle.mixture import mix_regression
from app.bundle.staged_gate import unpack

BUCKETS = 24


@dataclass(frozen=True)
class Pairs:
    """The paired rows, oldest first: their times and both NLLs."""

    times: np.ndarray
    served: np.ndarray
    staged: np.ndarray


def staged_nll(task: str, classes: Sequence[Any], blob: bytes, m: int, row: int, y: Any) -> float:
    """The staged mixture's NLL of outcome ``y`` (its JSON value) at ``row`` of a blob."""
    a = unpack(blob, task, m, len(classes))
    if task == "classification":
        keys = [str(c) for c in classes]
        p = float(a.tail[row, keys.index(str(y))])
        return -math.log(max(p, TINY))
    means, sds = a.tail[row : row + 1, :m], a.tail[row : row + 1, m:]
    lp = mix_regression(a.weights[row : row + 1], means, sds).logpdf(np.array([float(y)]))
    return float(-lp[0])


def pairs(
    engine: Engine,
    model: str,
    staged: str,
    task: str,
    classes: Sequence[Any],
    window: tuple[int | None, int | None] = (None, None),
) -> Pairs:
    """Both NLLs of every outcome row of ``model`` whose request ``staged`` shadowed,
    served in ``window`` (microseconds, since inclusive, until exclusive)."""
    o, s = outcomes.c, shadow.c
    query = (
        select(o.request_id, o.row_index, o.record_us, o.outcome, o.scores, s.answer, s.m, s.id)
        .join(shadow, (s.model == o.model) & (s.request_id == o.request_id))
        .where(o.model == model, s.staged == staged, s.served == o.version)
    )
    since, until = window
    if since is not None:
        query = query.where(o.record_us >= since)
    if until is not None:
        query = query.where(o.record_us < until)
    if not exists(engine):
        return Pairs(np.empty(0, np.int64), np.empty(0), np.empty(0))
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(o.record_us, o.request_id, o.row_index, s.id)).all()
    seen: set[tuple[str, int]] = set()
    times, served, mine = [], [], []
    for row in rows:
        rid, index, at, outcome, scores, blob, m = (row[k] for k in range(7))
        if (rid, index) in seen:  # a request id shadowed twice (a retried request)
            continue
        seen.add((rid, index))
        s0 = np.frombuffer(bytes(scores), "<f8")
        if s0.size % KINDS or not math.isfinite(float(s0[0])):
            continue
        try:
            nll = staged_nll(task, classes, bytes(blob), int(m), int(index), json.loads(outcome))
        except (ValueError, IndexError):
            continue  # an outcome or blob that does not read: left out, as /performance does
        times.append(int(at))
        served.append(min(float(s0[0]), NLL_CAP))
        mine.append(min(nll, NLL_CAP) if math.isfinite(nll) else NLL_CAP)
    return Pairs(np.array(times, np.int64), np.array(served), np.array(mine))


def summary(p: Pairs) -> dict[str, Any]:
    """Mean NLLs, their mean difference (staged minus served) and its paired SE."""
    k = int(p.times.size)
    if k == 0:
        return {"rows": 0, "served_nll": None, "staged_nll": None, "nll_diff": None,
                "paired_se": None, "since": None, "until": None}  # fmt: skip
    diff = p.staged - p.served
    se = float(diff.std(ddof=1) / math.sqrt(k)) if k > 1 else None
    return {
        "rows": k,
        "served_nll": float(p.served.mean()),
        "staged_nll": float(p.staged.mean()),
        "nll_diff": float(diff.mean()),
        "paired_se": se,
        "since": iso_from_us(int(p.times.min())),
        "until": iso_from_us(int(p.times.max())),
    }


def over_time(p: Pairs, buckets: int = BUCKETS) -> list[dict[str, Any]]:
    """The pair in up to ``buckets`` equal spans of the rows' times."""
    if p.times.size == 0:
        return []
    lo, hi = int(p.times.min()), int(p.times.max()) + 1
    width = max(1, -(-(hi - lo) // buckets))
    at = (p.times - lo) // width
    out = []
    for b in np.unique(at).tolist():
        sel = at == b
        out.append({
            "start": iso_from_us(lo + b * width),
            "rows": int(sel.sum()),
            "served_nll": float(p.served[sel].mean()),
            "staged_nll": float(p.staged[sel].mean()),
        })  # fmt: skip
    return out


def weight_drift(
    engine: Engine, model: str, manifest: Manifest, window: tuple[int | None, int | None]
) -> dict[str, Any]:
    """PSI per expert of the staged weights shadowed in ``window`` against the staged
    version's training histogram (None without one)."""
    hist = manifest.gate.weight_histogram
    s = shadow.c
    query = select(s.answer, s.m).where(s.model == model, s.staged == manifest.version)
    since, until = window
    if since is not None:
        query = query.where(s.created_us >= since)
    if until is not None:
        query = query.where(s.created_us < until)
    rows: list[Any] = []
    if exists(engine):
        with engine.connect() as conn:
            rows = list(conn.execute(query).all())
    classes = len(manifest.target.classes or [])
    weights = [unpack(bytes(b), manifest.task, int(m), classes).weights for b, m in rows]
    n = int(sum(w.shape[0] for w in weights))
    if hist is None or n == 0:
        return {"rows": n, "psi": None}
    counts = weight_counts(np.vstack(weights), tuple(hist.edges))
    reference = np.array([hist.counts[e] for e in manifest.expert_names])
    values = psi(counts, reference)
    return {"rows": n, "psi": dict(zip(manifest.expert_names, values.tolist(), strict=True))}


def compare(
    engine: Engine,
    model: str,
    served: Manifest,
    staged: Manifest,
    window: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """The ``staged`` block of ``GET /performance?compare=staged``."""
    classes = list(served.target.classes or [])
    p = pairs(engine, model, staged.version, served.task, classes, window)
    return {
        "model": model,
        "version": staged.version,
        "served_version": served.version,
        **summary(p),
        "weight_drift": weight_drift(engine, model, staged, window),
        "over_time": over_time(p),
    }
