"""What one group commit of the audit writer costs, in process: the rows built from the
records (:func:`app.audit.write.group_rows.log_rows`) and written with their chain link
(:meth:`app.audit.write.trail_db.AuditStore.insert_rows`), on SQLite and PostgreSQL.

Single-row records of a five-expert classifier under the server's own ids, in groups of
1, 8 and 32, as the writer commits them under load. Sizes and trails take turns within
each round, so a slow spell of the machine falls on all of them alike. No HTTP, no load
generator: a change to the writer's own work shows here, per commit and per record.

    .venv/bin/python bench/audit_commit.py                 # 5 rounds of 200 groups a size
    .venv/bin/python bench/audit_commit.py --trails sqlite --rounds 3 --groups 100
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/audit_commit.py --label other

Results go to ``<out>/audit_commit-<label>-<UTC>.json`` and ``.md``, and the table to the
terminal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # after PYTHONPATH: another tree's app may go first

import numpy as np  # noqa: E402

from app.audit.store.chain import chain_key  # noqa: E402
from app.audit.store.records import AuditRecord, now_us  # noqa: E402
from app.audit.write.group_rows import log_rows  # noqa: E402
from app.audit.write.trail_db import AuditStore  # noqa: E402
from app.core.context import new_request_id  # noqa: E402
from bench.peers.postgres import fresh_schema  # noqa: E402
from bench.speed.report import write_results  # noqa: E402

EXPERTS = ("linear", "forest", "knn", "mlp", "poly3")
KEY = chain_key(b"bench-audit-commit-key-0123456789")


def record(rng: np.random.Generator) -> AuditRecord:
    """A single-row record as the demo bundle's /predict makes it."""
    w = rng.dirichlet(np.ones(len(EXPERTS)), size=1)
    p = rng.dirichlet(np.ones(2), size=1)
    return AuditRecord(
        new_request_id(), now_us(), "demo", "v1", "predict", "classification", EXPERTS,
        (0, 1), w, p, rng.random((1, 4)), 1.5, "hash", [{"x1": 0.5, "x2": -1.0}],
        b"k" * 32, rng.dirichlet(np.ones(2), size=(1, len(EXPERTS))),
    )  # fmt: skip


@contextmanager
def trail(kind: str) -> Iterator[str]:
    if kind == "postgres":
        with fresh_schema() as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="audit-commit-") as tmp:
        yield f"sqlite:///{tmp}/audit.db"


Took = list[tuple[float, float]]


def one_size(store: AuditStore, size: int, groups: int, rng: np.random.Generator) -> Took:
    """Per commit of ``groups`` groups of ``size`` records: microseconds of wall time, and
    of this thread's CPU (the writer's own work, which holds the GIL the event loop needs;
    on a shared machine the wall time is mostly the disk's and the other tenants')."""
    took = []
    for _ in range(groups):
        batch = [record(rng) for _ in range(size)]
        t0, c0 = time.perf_counter(), time.thread_time()
        store.insert_rows(log_rows(batch))
        took.append(((time.perf_counter() - t0) * 1e6, (time.thread_time() - c0) * 1e6))
    return took


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    sizes = [int(s) for s in args.sizes.split(",")]
    trails = args.trails.split(",")
    samples: dict[tuple[str, int], Took] = {(t, s): [] for t in trails for s in sizes}
    for kind in trails:
        with trail(kind) as url:
            store = AuditStore(url, 30.0, KEY)
            store.prepare()
            try:
                one_size(store, 8, 50, rng)  # warm: connection, version row, caches
                for r in range(args.rounds):
                    for size in sizes:
                        samples[(kind, size)] += one_size(store, size, args.groups, rng)
                    print(f"{kind}: round {r + 1} of {args.rounds}", flush=True)
            finally:
                store.close()
    rows = []
    for (kind, size), took in samples.items():
        wall, cpu = [w for w, _ in took], [c for _, c in took]
        med = statistics.median(wall)
        rows.append({
            "trail": kind, "records": size, "groups": len(took), "median_us": round(med, 1),
            "p90_us": round(float(np.percentile(wall, 90)), 1),
            "cpu_us": round(statistics.median(cpu), 1),
            "cpu_us_per_record": round(statistics.median(cpu) / size, 1),
        })  # fmt: skip
    return rows


def markdown(label: str, rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        f"# Audit group commit in process ({label})",
        "",
        "| trail | records a group | groups | median µs a commit | p90 µs "
        "| CPU µs a commit | CPU µs a record |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trail']} | {r['records']} | {r['groups']} | {r['median_us']:.0f} "
            f"| {r['p90_us']:.0f} | {r['cpu_us']:.0f} | {r['cpu_us_per_record']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trails", default="sqlite,postgres", help="comma list")
    p.add_argument("--sizes", default="1,8,32", help="records a group, comma list")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--groups", type=int, default=200, help="groups a size a round")
    p.add_argument("--label", default="this tree", help="names the tree measured")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    rows = run(args)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    slug = "".join(c if c.isalnum() else "-" for c in args.label)
    report = {"label": args.label, "app": sys.modules["app"].__file__, "rows": rows}
    write_results(args.out, f"audit_commit-{slug}-{stamp}", report, markdown(args.label, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
