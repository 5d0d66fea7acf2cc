"""``GET /performance``: realised scores over the served rows that have outcomes.

``since`` and ``until`` (ISO-8601, naive is UTC; since inclusive, until exclusive) select
rows by the time they were served, ``version`` by the version that served them. Every
figure is a mean of the rows' stored scores (:mod:`app.audit.scores`): the mixture's, each
expert's over the rows whose record had it, the best expert in hindsight (the lowest NLL
among the experts of every row) and the mixture's regret against it, trust calibration
(per expert and bin of its weight), and up to 24 time buckets.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Engine

from app.audit import outcomes, rollup
from app.audit.records import iso_from_us
from app.audit.scores import KINDS
from app.bundle.manifest import check_safe_name
from app.contract.performance import SCORES
from app.core.service import Service
from app.core.weights import parse_time_us, single_params
from app.errors import Fault, InvalidInput

QUERY = ("since", "until", "version")
TRUST_BINS = 10
MAX_BUCKETS = 24


async def performance(service: Service, items: Sequence[tuple[str, str]]) -> dict[str, Any]:
    model = service.runtime.require()
    params = single_params(items)
    unknown = sorted(set(params) - set(QUERY))
    if unknown:
        raise InvalidInput(
            [Fault("unknown_parameter", k, f"unknown; give {', '.join(QUERY)}") for k in unknown]
        )
    since = parse_time_us("since", params["since"]) if "since" in params else None
    until = parse_time_us("until", params["until"]) if "until" in params else None
    if since is not None and until is not None and since >= until:
        raise InvalidInput([Fault("invalid_value", "until", "must be later than since")])
    version = params.get("version")
    if version is not None:
        try:
            check_safe_name(version, "version")
        except ValueError as exc:
            raise InvalidInput([Fault("invalid_value", "version", str(exc))]) from None
    store = service.require_store()
    found: dict[str, Any] = await service.read_store(
        report, store.engine, model.name, model.task, since, until, version
    )
    return {
        "model": model.name,
        "task": model.task,
        "filter": {k: params.get(k) for k in QUERY},
        **found,
    }


def report(
    engine: Engine,
    model: str,
    task: str,
    since: int | None,
    until: int | None,
    version: str | None,
) -> dict[str, Any]:
    """Read the matching outcomes' scores and sum them up (blocking)."""
    rows = outcomes.scored(engine, model, since, until, version)
    return Summary(task, rows, since, until).json()


class Summary:
    """The stored scores of a set of rows, grouped by the experts their records had."""

    def __init__(
        self, task: str, rows: list[tuple[int, str, bytes, bytes]], lo: int | None, hi: int | None
    ) -> None:
        self.task = task
        self.n = len(rows)
        times = np.fromiter((r[0] for r in rows), np.int64, self.n)
        start = lo if lo is not None else int(times.min()) if self.n else 0
        end = hi if hi is not None else int(times.max()) + 1 if self.n else 1
        slots = min(MAX_BUCKETS, self.n)
        self.edges = rollup.even_edges(start, end, slots) if self.n else np.zeros(0)
        self.slots = len(self.edges) - 1 if self.n else 0
        keys = np.clip(np.searchsorted(self.edges, times, side="right") - 1, 0, self.slots - 1)
        by_experts: dict[str, list[int]] = {}
        for k, r in enumerate(rows):
            by_experts.setdefault(r[1], []).append(k)
        self.experts: list[str] = []
        # Per group: its experts, bucket keys, weights (k, m), scores (k, 1 + m, KINDS).
        self.groups = []
        for text, picks in by_experts.items():
            names = json.loads(text)
            self.experts += [e for e in names if e not in self.experts]
            m = len(names)
            w = np.frombuffer(b"".join(rows[k][2] for k in picks), "<f8").reshape(-1, m)
            s = np.frombuffer(b"".join(rows[k][3] for k in picks), "<f8")
            self.groups.append((names, keys[picks], w, s.reshape(-1, 1 + m, KINDS)))

    def scores(self, count: float, sums: Sequence[float]) -> dict[str, Any]:
        """Means of the three sums over ``count`` rows, named for the task."""
        names = SCORES[self.task]
        out: dict[str, Any] = {"rows": int(count)}
        for k, name in enumerate(names):
            mean = sums[k] / count if count else None
            if name == "rmse" and mean is not None:
                mean = math.sqrt(mean)
            out[name] = mean
        return out

    def _sums(self, column: int | str) -> tuple[np.ndarray, np.ndarray]:
        """Per time bucket: rows and the three sums, of the mixture (0) or one expert."""
        count = np.zeros(max(self.slots, 1))
        sums = np.zeros((max(self.slots, 1), KINDS))
        for names, keys, _w, s in self.groups:
            if column == 0:
                j = 0
            elif column in names:
                j = 1 + names.index(column)
            else:
                continue
            count += np.bincount(keys, minlength=len(count))
            for kind in range(KINDS):
                sums[:, kind] += np.bincount(keys, s[:, j, kind], minlength=len(count))
        return count, sums

    def json(self) -> dict[str, Any]:
        mixture = self._sums(0)
        experts = {e: self._sums(e) for e in self.experts}
        overall = {e: self.scores(c.sum(), s.sum(axis=0)) for e, (c, s) in experts.items()}
        everywhere = [e for e in self.experts if overall[e]["rows"] == self.n and self.n]
        best = min(everywhere, key=lambda e: overall[e]["nll"]) if everywhere else None
        mix = self.scores(mixture[0].sum(), mixture[1].sum(axis=0))
        buckets = [
            {
                "start": iso_from_us(int(self.edges[b])),
                "end": iso_from_us(int(self.edges[b + 1])),
                "mixture": self.scores(mixture[0][b], mixture[1][b]),
                "experts": {e: self.scores(c[b], s[b]) for e, (c, s) in experts.items()},
            }
            for b in range(self.slots)
        ]
        return {
            "rows": self.n,
            "mixture": mix,
            "experts": overall,
            "best_expert": best,
            "regret": mix["nll"] - overall[best]["nll"] if best is not None else None,
            "calibration": {e: self.trust(e) for e in self.experts},
            "buckets": buckets,
        }

    def trust(self, expert: str) -> list[dict[str, Any]]:
        """By bin of the expert's weight: its NLL, the other experts' mean NLL, and how
        often it had the lowest NLL of all."""
        size = TRUST_BINS
        acc = np.zeros((5, size))  # rows, weight, own nll, others' nll, best
        for names, _keys, w, s in self.groups:
            if expert not in names:
                continue
            j = names.index(expert)
            nll = s[:, 1:, 0]
            others = (nll.sum(axis=1) - nll[:, j]) / max(1, len(names) - 1)
            bins = np.minimum((w[:, j] * size).astype(np.int64), size - 1)
            for row, values in enumerate(
                (np.ones(len(bins)), w[:, j], nll[:, j], others, nll.argmin(axis=1) == j)
            ):
                acc[row] += np.bincount(bins, values, minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = acc[1:] / acc[0]
        names = ("mean_weight", "nll", "others_nll", "best_share")
        return [
            {
                "low": b / size,
                "high": (b + 1) / size,
                "rows": int(acc[0, b]),
                **{name: float(means[k, b]) if acc[0, b] else None for k, name in enumerate(names)},
            }
            for b in range(size)
        ]
