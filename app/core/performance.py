"""``GET /performance``: realised scores over the served rows that have outcomes.

``since`` and ``until`` (ISO-8601, naive is UTC; since inclusive, until exclusive) select
rows by the time they were served, ``version`` by the version that served them, and
``exclude_poster`` (comma-separated, as ``posters`` lists them) leaves posters' outcomes
out; ``compare=staged`` adds the ``staged`` block (:mod:`app.core.shadow_report`). Every
figure is a mean of the rows' stored scores (:mod:`app.audit.read.scores`): the
mixture's, each expert's over the rows whose record had it, the best expert in hindsight
(the lowest NLL among the experts of every row) and the mixture's regret against it,
trust calibration (per expert and bin of its weight), and ``buckets`` time buckets (24
by default). A stored row that no longer reads as the server wrote it (its scores not
finite, or a regression outcome outside the model's range: rows stored before the range
was checked) is left out and counted in ``excluded_rows``; an NLL counts at most
:data:`~app.audit.read.scores.NLL_CAP`, as at ingest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Engine

from app.audit.read import rollup
from app.audit.read.change_point import change_point
from app.audit.read.outcome_filter import ANONYMOUS, OutcomeFilter, scored
from app.audit.read.scores import KINDS, NLL_CAP
from app.audit.store.records import iso_from_us
from app.bundle.manifest import check_safe_name
from app.contract.performance import SCORES
from app.core.outcomes import OutcomeRange, outcome_range
from app.core.service import Service
from app.core.shadow_report import check_compare, staged_block
from app.core.weights import parse_time_us, single_params
from app.errors import Fault, InvalidInput

QUERY = ("since", "until", "version", "exclude_poster", "buckets", "compare")
TRUST_BINS = 10
MAX_BUCKETS = 24  # the default
MOST_BUCKETS = 200
MOST_POSTERS = 100
_POSTER = re.compile(r"key:[0-9a-f]{12}")
FIRST_US, LAST_US = -62_135_596_800_000_000, 253_402_300_799_999_999  # the years 1 to 9999


async def performance(service: Service, items: Sequence[tuple[str, str]]) -> dict[str, Any]:
    model = service.runtime.require()
    params = single_params(items)
    unknown = sorted(set(params) - set(QUERY))
    if unknown:
        raise InvalidInput(
            [Fault("unknown_parameter", k, f"unknown; give {', '.join(QUERY)}") for k in unknown]
        )
    since, until = _time("since", params), _time("until", params)
    if since is not None and until is not None and since >= until:
        raise InvalidInput([Fault("invalid_value", "until", "must be later than since")])
    version = params.get("version")
    if version is not None:
        try:
            check_safe_name(version, "version")
        except ValueError:
            problem = f"not a version name: {_shown(version)} (letters, digits, ._-, 1-128)"
            raise InvalidInput([Fault("invalid_value", "version", problem)]) from None
    posters = parse_posters(params.get("exclude_poster"))
    slots = parse_buckets(params.get("buckets"))
    compare = check_compare(params.get("compare"))
    store = service.require_store()
    flt = OutcomeFilter(model.name, since, until, version, posters)
    bounds = outcome_range(model.manifest.target)
    found: dict[str, Any] = await service.read_store(
        report, store.engine, model.name, model.task, since, until, version, flt, slots, bounds
    )
    shown = {k: params.get(k) for k in ("since", "until", "version")}
    if compare is not None:
        found["staged"] = await staged_block(service, model, (since, until))
    return {
        "model": model.name,
        "task": model.task,
        "filter": {**shown, "exclude_poster": list(posters), "buckets": slots},
        **found,
    }


LONGEST_TIME = 64  # an ISO-8601 time with microseconds and an offset takes 32


def _shown(text: str) -> str:
    """A query value in a message: whole, or its start and its length."""
    return repr(text) if len(text) <= 80 else f"{text[:40]!r}... ({len(text):,} characters)"


def _time(name: str, params: dict[str, str]) -> int | None:
    text = params.get(name)
    if text is None:
        return None
    if len(text) > LONGEST_TIME:
        raise InvalidInput(
            [Fault("invalid_value", name, f"expected an ISO-8601 time, got {_shown(text)}")]
        )
    return parse_time_us(name, text)


def parse_posters(text: str | None) -> tuple[str, ...]:
    """``exclude_poster``: posters as ``posters`` names them, comma-separated."""
    if text is None:
        return ()
    names = [p.strip() for p in text.split(",")]
    bad = [p for p in names if p != ANONYMOUS and not _POSTER.fullmatch(p)]
    if bad or len(names) > MOST_POSTERS:
        problem = (
            f"{_shown(bad[0])} is not a poster"
            if bad
            else f"{len(names)} posters; give at most {MOST_POSTERS}"
        )
        raise InvalidInput(
            [
                Fault(
                    "invalid_value",
                    "exclude_poster",
                    f"{problem}: give posters as GET /performance lists them (key: and 12 "
                    f"hex digits, or {ANONYMOUS}), separated by commas",
                )
            ]
        )
    return tuple(dict.fromkeys(names))


def parse_buckets(text: str | None) -> int:
    if text is None:
        return MAX_BUCKETS
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MOST_BUCKETS:
        raise InvalidInput(
            [
                Fault(
                    "invalid_value",
                    "buckets",
                    f"expected an integer from 1 to {MOST_BUCKETS}, got {_shown(text)}",
                )
            ]
        )
    return int(text)


def report(
    engine: Engine,
    model: str,
    task: str,
    since: int | None,
    until: int | None,
    version: str | None,
    flt: OutcomeFilter | None = None,
    slots: int = MAX_BUCKETS,
    bounds: OutcomeRange | None = None,
) -> dict[str, Any]:
    """Read the matching outcomes' scores and sum them up (blocking)."""
    flt = flt if flt is not None else OutcomeFilter(model, since, until, version)
    rows = scored(engine, flt)
    return Summary(task, rows, since, until, slots, bounds).json()


class Summary:
    """The stored scores of a set of rows, grouped by the experts their records had.

    A row is ``(record_us, experts, weights, scores[, poster[, outcome]])`` as stored;
    rows that do not read as the server writes them are counted in ``excluded`` and left
    out."""

    def __init__(
        self,
        task: str,
        rows: Sequence[Sequence[Any]],
        lo: int | None,
        hi: int | None,
        slots: int = MAX_BUCKETS,
        bounds: OutcomeRange | None = None,
    ) -> None:
        self.task = task
        self.posters: dict[str, int] = {}
        kept, groups = _checked(rows, bounds if task == "regression" else None, self.posters)
        self.excluded = len(rows) - kept
        self.n = kept
        times = np.concatenate([g[0] for g in groups.values()]) if groups else np.zeros(0)
        start = lo if lo is not None else int(times.min()) if self.n else 0
        end = hi if hi is not None else int(times.max()) + 1 if self.n else 1
        slots = min(slots, self.n)
        self.edges = rollup.even_edges(start, end, slots) if self.n else np.zeros(0)
        self.slots = len(self.edges) - 1 if self.n else 0
        self.experts: list[str] = []
        # Per group: its experts, bucket keys, weights (k, m), scores (k, 1 + m, KINDS).
        self.groups = []
        self.times = [at for at, _w, _s in groups.values()]  # the change point's order
        for names, (at, w, s) in groups.items():
            self.experts += [e for e in names if e not in self.experts]
            keys = np.clip(np.searchsorted(self.edges, at, side="right") - 1, 0, self.slots - 1)
            self.groups.append((list(names), keys, w, s))

    def scores(self, count: float, sums: Sequence[float]) -> dict[str, Any]:
        """Means of the three sums over ``count`` rows, named for the task."""
        names = SCORES[self.task]
        out: dict[str, Any] = {"rows": int(count)}
        for k, name in enumerate(names):
            mean = sums[k] / count if count else None
            if name == "rmse" and mean is not None:
                mean = math.sqrt(mean)
            # Finite rows of finite scores: only a sum past 1.8e308 could overflow.
            out[name] = mean if mean is None or math.isfinite(mean) else None
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
        everywhere = [
            e
            for e in self.experts
            if overall[e]["rows"] == self.n and self.n and overall[e]["nll"] is not None
        ]
        best = min(everywhere, key=lambda e: overall[e]["nll"]) if everywhere else None
        mix = self.scores(mixture[0].sum(), mixture[1].sum(axis=0))
        regret = None
        if best is not None and mix["nll"] is not None:
            regret = mix["nll"] - overall[best]["nll"]
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
            "excluded_rows": self.excluded,
            "posters": dict(sorted(self.posters.items())),
            "mixture": mix,
            "experts": overall,
            "best_expert": best,
            "regret": regret,
            "calibration": {e: self.trust(e) for e in self.experts},
            "buckets": buckets,
            "change_point": self.change_point(everywhere),
        }

    def change_point(self, experts: list[str]) -> dict[str, Any] | None:
        """The suggested change of the mixture's NLL, with the experts that every row had."""
        if not self.n:
            return None
        nll = [
            (s[:, 0, 0], {e: s[:, 1 + n.index(e), 0] for e in experts})
            for n, _k, _w, s in self.groups
        ]
        found = change_point(
            np.concatenate(self.times),
            np.concatenate([m for m, _ in nll]),
            {e: np.concatenate([x[e] for _, x in nll]) for e in experts},
        )
        if found is not None:
            found["served_at"] = iso_from_us(found.pop("served_at_us"))
        return found

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
            bins = np.clip((w[:, j] * size).astype(np.int64), 0, size - 1)
            for row, values in enumerate(
                (np.ones(len(bins)), w[:, j], nll[:, j], others, nll.argmin(axis=1) == j)
            ):
                acc[row] += np.bincount(bins, values, minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = acc[1:] / acc[0]
        figures = ("mean_weight", "nll", "others_nll", "best_share")
        return [
            {
                "low": b / size,
                "high": (b + 1) / size,
                "rows": int(acc[0, b]),
                **{
                    name: float(means[k, b]) if acc[0, b] and np.isfinite(means[k, b]) else None
                    for k, name in enumerate(figures)
                },
            }
            for b in range(size)
        ]


_Group = tuple[np.ndarray, np.ndarray, np.ndarray]


def _checked(
    rows: Sequence[Sequence[Any]], bounds: OutcomeRange | None, posters: dict[str, int]
) -> tuple[int, dict[tuple[str, ...], _Group]]:
    """The rows that read as the server writes them, grouped by their experts: per group,
    its rows' times, weights (k, m) and scores (k, 1 + m, KINDS), each NLL at most
    NLL_CAP; the count of those kept; and, per poster, the rows kept."""
    parsed: dict[Any, tuple[str, ...] | None] = {}
    picked: dict[tuple[str, ...], tuple[list[int], list[bytes], list[bytes], list[str]]] = {}
    for row in rows:
        at, experts, w, s = row[0], row[1], row[2], row[3]
        poster = row[4] if len(row) > 4 else None
        names = parsed.get(experts) if isinstance(experts, str) else None
        if isinstance(experts, str) and experts not in parsed:
            names = parsed[experts] = _names(experts)
        if names is None or type(at) is not int or not isinstance(w, bytes | memoryview):
            continue
        if not FIRST_US <= at < LAST_US:  # a time no ISO-8601 date can show
            continue
        m = len(names)
        w, s = bytes(w), bytes(s) if isinstance(s, bytes | memoryview) else b""
        if len(w) != 8 * m or len(s) != 8 * (1 + m) * KINDS:
            continue
        if bounds is not None and not _inside(row[5] if len(row) > 5 else None, bounds):
            continue
        group = picked.setdefault(names, ([], [], [], []))
        group[0].append(at)
        group[1].append(w)
        group[2].append(s)
        group[3].append(poster if isinstance(poster, str) else ANONYMOUS)
    kept = 0
    out: dict[tuple[str, ...], _Group] = {}
    for names, (times, ws, ss, who) in picked.items():
        m = len(names)
        w = np.frombuffer(b"".join(ws), "<f8").reshape(-1, m)
        s = np.frombuffer(b"".join(ss), "<f8").reshape(-1, 1 + m, KINDS).copy()
        ok = np.isfinite(w).all(axis=1) & np.isfinite(s).all(axis=(1, 2))
        if not ok.any():
            continue
        s[:, :, 0] = np.minimum(s[:, :, 0], NLL_CAP)
        at = np.array(times, dtype=np.int64)
        out[names] = (at[ok], w[ok], s[ok])
        kept += int(ok.sum())
        for name, good in zip(who, ok.tolist(), strict=True):
            if good:
                posters[name] = posters.get(name, 0) + 1
    return kept, out


def _names(text: str) -> tuple[str, ...] | None:
    try:
        names = json.loads(text)
    except ValueError:
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    if len(set(names)) != len(names):
        return None
    return tuple(names)


def _inside(outcome: Any, bounds: OutcomeRange) -> bool:
    """A stored regression outcome (its JSON text) within the model's range."""
    if not isinstance(outcome, str):
        return True  # rows read without their outcome: nothing to check
    try:
        number = float(json.loads(outcome))
    except (ValueError, TypeError):
        return False
    return math.isfinite(number) and bounds.refusal(number) is None
