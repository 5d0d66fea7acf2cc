"""Audit trails for the benchmarks that read them: filled with the served graph's real
answers through the app's own store, and our server started on them.

:func:`seed` writes ``n`` records of 1-3 rows (or ``rows`` rows each), each the bundle's
answer to a random input inside its training range, as the server would have written it
(the experts' own outputs included), under request ids ``<prefix>-<i:07d>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from app.audit.store.chain import chain_key
from app.audit.store.records import AuditRecord, now_us
from app.audit.write.trail_db import AuditStore
from app.bundle.loader import open_bundle
from app.bundle.predictor import BundlePredictor
from bench.peers import procs
from bench.peers.ours import READY_PATH, OursSettings, ours_command

DAY_US = 86_400 * 1_000_000
BATCH = 500
SEED_HASH_KEY = b"bench-hash-key"


def request_id(prefix: str, i: int) -> str:
    return f"{prefix}-{i:07d}"


def seed(
    version_dir: Path,
    url: str,
    n: int,
    days: float,
    rng: np.random.Generator,
    rows: int | None = None,
    prefix: str = "bench",
    input_mode: str = "hash",
) -> dict[str, Any]:
    """``n`` records over the last ``days``, in time order; what they hold (the inputs
    ``X`` and each expert's served probabilities among it). ``input_mode`` is what the
    records keep of their inputs, as ``IABMA_AUDIT_PAYLOAD``."""
    bundle = open_bundle(version_dir)
    m = bundle.manifest
    if any(f.dtype != "float" or f.low is None or f.high is None for f in m.features):
        raise SystemExit("the bench seeds numeric bundles with recorded ranges (e.g. demo)")
    sizes = rng.integers(1, 4, n) if rows is None else np.full(n, rows)
    total = int(sizes.sum())
    X = {f.name: rng.uniform(f.low, f.high, total) for f in m.features}
    columns = {f.input: X[f.name].astype(np.float32).reshape(-1, 1) for f in m.features}
    pred = BundlePredictor(bundle).predict(columns, interval=False)
    assert pred.proba is not None, "the bench seeds a classification bundle"
    span = int(days * DAY_US)
    start = now_us() - span
    times = np.sort(rng.integers(start, start + span, n))
    store = AuditStore(url, 30.0, chain_key(SEED_HASH_KEY))
    store.prepare()
    at, batch = 0, []
    for i in range(n):
        part = slice(at, at + int(sizes[i]))
        at = part.stop
        instances = [
            {name: float(v[j]) for name, v in X.items()} for j in range(part.start, part.stop)
        ]
        batch.append(
            AuditRecord(
                request_id=request_id(prefix, i),
                created_us=int(times[i]),
                model=m.name,
                version=m.version,
                route="predict",
                task=m.task,
                experts=tuple(m.expert_names),
                classes=tuple(m.target.classes or ()),
                weights=pred.weights[part],
                prediction=pred.proba[part],
                uncertainty=pred.uncertainty[part],
                latency_ms=1.0,
                input_mode=input_mode,
                instances=instances,
                hash_key=SEED_HASH_KEY,
                expert_outputs=pred.expert_proba[part] if pred.expert_proba is not None else None,
            )
        )
        if len(batch) == BATCH:
            store.insert(batch)
            batch = []
    if batch:
        store.insert(batch)
    store.close()
    return {
        "records": n,
        "rows": total,
        "sizes": sizes,
        "experts": m.expert_names,
        "features": list(X),
        "classes": list(m.target.classes or ()),
        "X": X,
        "expert_proba": pred.expert_proba,
    }


def span(engine: Any) -> tuple[int, int]:
    """The middle of a trail's times (where the benchmarks archive up to: its older half,
    not the links a server writes meanwhile) and its newest time."""
    with engine.connect() as conn:
        lo, hi = conn.exec_driver_sql(
            "SELECT min(created_us), max(created_us) FROM iabma_audit_log"
        ).one()
    return (int(lo) + int(hi)) // 2, int(hi)


@contextmanager
def serve(
    store: Path,
    name: str,
    url: str,
    workdir: Path,
    workers: int = 1,
    port: int | None = None,
    **env: str,
) -> Iterator[str]:
    """Our server on ``url``'s trail (``IABMA_*`` extras in ``env``), on ``port`` (any free
    one by default); yields its base URL."""
    port = port or procs.free_port()
    audit = "postgres" if url.startswith("postgresql") else "sqlite"
    argv, full = ours_command(OursSettings(store, name, workers, audit, url), port)
    full.update(IABMA_LOG_LEVEL="WARNING", IABMA_RELOAD_INTERVAL_SECONDS="0")
    full.update({f"IABMA_{k.upper()}": v for k, v in env.items()})
    log = workdir / f"server-{port}.log"
    with procs.server(argv, full, Path(__file__).resolve().parents[2], log, port, READY_PATH):
        yield f"http://127.0.0.1:{port}"
