"""The served and the staged version compared on the same outcome rows, paired.

Every outcome row whose request was shadowed (:mod:`app.audit.store.shadow_table`) has two
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
from sqlalchemy import Engine, func, select

from app.audit.read.scores import KINDS, NLL_CAP, TINY
from app.audit.store.records import iso_from_us
from app.audit.store.shadow_table import exists, read, shadow
from app.audit.store.tables import outcomes
from app.bundle.manifest import Manifest
from app.bundle.mixture import mix_regression
from app.bundle.weight_bins import psi, weight_counts

BUCKETS = 24
# A shadowed request's time is its record's plus the moments between the record and the
# queue: outcomes are matched to groups within this much of their record's time.
SLACK_US = 60_000_000


@dataclass(frozen=True)
class Pairs:
    """The paired rows, oldest first: their times and both NLLs."""

    times: np.ndarray
    served: np.ndarray
    staged: np.ndarray


def staged_nll(task: str, keys: Sequence[str], row: np.ndarray, m: int, y: Any) -> float:
    """The staged mixture's NLL of outcome ``y`` (its JSON value) given one row of a
    shadowed answer: ``m`` weights, then the classes' probabilities, or the experts'
    means and tempered sds."""
    if task == "classification":
        return -math.log(max(float(row[m + keys.index(str(y))]), TINY))
    w, means, sds = row[None, :m], row[None, m : 2 * m], row[None, 2 * m : 3 * m]
    return float(-mix_regression(w, means, sds).logpdf(np.array([float(y)]))[0])


def pairs(
    engine: Engine,
    model: str,
    staged: str,
    task: str,
    classes: Sequence[Any],
    window: tuple[int | None, int | None] = (None, None),
) -> Pairs:
    """Both NLLs of every outcome row of ``model`` whose request ``staged`` shadowed,
    served in ``window`` (microseconds, since inclusive, until exclusive).

    Only the outcomes within the staged version's shadowed time are read, and only the
    shadowed groups within their time: a periodic refresh stays cheap however long the
    trail or the shadow."""
    lo, hi = span(engine, model, staged)
    if lo is None or hi is None:
        return Pairs(np.empty(0, np.int64), np.empty(0), np.empty(0))
    since, until = window
    since = lo - SLACK_US if since is None else max(since, lo - SLACK_US)
    until = hi + SLACK_US if until is None else min(until, hi + SLACK_US)
    o = outcomes.c
    query = select(o.request_id, o.row_index, o.record_us, o.outcome, o.scores, o.version)
    query = query.where(o.model == model, o.record_us >= since, o.record_us < until)
    with engine.connect() as conn:
        rows: list[Any] = list(conn.execute(query.order_by(o.record_us, o.request_id, o.row_index)))
    if not rows:
        return Pairs(np.empty(0, np.int64), np.empty(0), np.empty(0))
    times_us = [int(r[2]) for r in rows]
    shadowed = read(engine, model, staged, (min(times_us) - SLACK_US, max(times_us) + SLACK_US))
    keys = [str(c) for c in classes]
    times, served, mine = [], [], []
    for rid, index, at, outcome, scores, version in rows:
        got = shadowed.get(rid)
        if got is None or got.served != version or not 0 <= index < got.answer.shape[0]:
            continue
        s0 = np.frombuffer(bytes(scores), "<f8")
        if s0.size % KINDS or not math.isfinite(float(s0[0])):
            continue
        try:
            nll = staged_nll(task, keys, got.answer[index], got.m, json.loads(outcome))
        except (ValueError, IndexError):
            continue  # an outcome that does not read: left out, as /performance does
        times.append(int(at))
        served.append(min(float(s0[0]), NLL_CAP))
        mine.append(min(nll, NLL_CAP) if math.isfinite(nll) else NLL_CAP)
    return Pairs(np.array(times, np.int64), np.array(served), np.array(mine))


def span(engine: Engine, model: str, staged: str) -> tuple[int | None, int | None]:
    """When ``staged`` shadowed its first and last request of ``model``."""
    if not exists(engine):
        return None, None
    c = shadow.c
    query = select(func.min(c.first_us), func.max(c.last_us))
    with engine.connect() as conn:
        found: Any = conn.execute(query.where(c.model == model, c.staged == staged)).one()
    lo, hi = found
    return (None if lo is None else int(lo)), (None if hi is None else int(hi))


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
    m = len(manifest.experts)
    shadowed = read(engine, model, manifest.version, window).values()
    weights = [got.answer[:, :m] for got in shadowed]
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
    drift: bool = True,
) -> dict[str, Any]:
    """The ``staged`` block of ``GET /performance?compare=staged``; without ``drift``,
    no weight drift (it reads every shadowed row of the window, not only those with
    outcomes: the gauges' refresh does without)."""
    classes = list(served.target.classes or [])
    p = pairs(engine, model, staged.version, served.task, classes, window)
    block: dict[str, Any] = {"model": model, "version": staged.version}
    block["served_version"] = served.version
    block |= summary(p)
    if drift:
        block["weight_drift"] = weight_drift(engine, model, staged, window)
    block["over_time"] = over_time(p)
    return block
