"""Outcomes at speed: ingest, GET /performance on a long trail, exact counts under load.

The targets, medians of ``--rounds``:

- ingest: ``--outcomes`` (100,000) outcomes in batches of 1,000 into a SQLite trail (one
  worker) and into PostgreSQL behind two workers, at 20,000 outcomes/s or more;
- ``GET /performance`` over ``--records`` (1,000,000) records with 100,000 outcomes, within
  1 s;
- exact counts: wrk loads single-row ``/predict`` on the two PostgreSQL workers (bounded:
  ``--wrk-seconds`` at ``--wrk-connections``) while senders post outcomes, every batch
  twice; records, outcomes, duplicates and ``/metrics`` must then agree exactly.

Each outcome names a single-row record of its own: a batch of 1,000 outcomes looks up
1,000 records. A round posts outcomes for a random tenth of the trail's records in the
order they were served, as a feed of outcomes follows its predictions; one more round,
reported beside the target, posts them in random order, the worst case for the indexes
(every insert lands on another page of them). Records are the demo
bundle's real answers, written through the app's store (``bench/speed/trail.py``). That no
acknowledged outcome is lost on SIGKILL is a test (``tests/app/test_server_feedback.py``).
Figures go to ``<out>/feedback_speed-<UTC>.json`` and ``.md``, and to the terminal.

    .venv/bin/python bench/feedback_speed.py                          # ~10 min
    .venv/bin/python bench/feedback_speed.py --records 200000 --rounds 1   # ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.loadgen.wrk import run_wrk, wrk_binary  # noqa: E402
from bench.peers import procs  # noqa: E402
from bench.peers.postgres import fresh_schema  # noqa: E402
from bench.speed.bundles import prepare_bundle  # noqa: E402
from bench.speed.trail import request_id, seed, serve  # noqa: E402

BATCH = 1000
INGEST_TARGET, PERFORMANCE_TARGET_S = 20_000.0, 1.0


def plan_rounds(
    n: int, rounds: int, size: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray]:
    """``rounds`` disjoint random samples of ``size`` of ``n`` records, each in the order
    served; and one more, in random order."""
    picked = rng.permutation(n)[: (rounds + 1) * size]
    ordered = [np.sort(picked[k * size : (k + 1) * size]) for k in range(rounds)]
    return ordered, picked[rounds * size :]


def outcomes_for(records: np.ndarray, classes: list[Any], rng: np.random.Generator) -> list[dict]:
    drawn = rng.integers(0, len(classes), len(records))
    return [
        {"request_id": request_id("bench", int(i)), "outcome": classes[int(c)]}
        for i, c in zip(records, drawn, strict=True)
    ]


def post_all(base: str, outcomes: list[dict], senders: int, copies: int = 1) -> dict[str, Any]:
    """Post ``outcomes`` in batches of BATCH from ``senders`` threads (each batch ``copies``
    times, by different threads); the answers added up and the wall time."""
    batches = [outcomes[k : k + BATCH] for k in range(0, len(outcomes), BATCH)] * copies
    lock = threading.Lock()
    sums = {"accepted": 0, "duplicates": 0, "requests": 0}

    def send(part: list[list[dict]]) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            for batch in part:
                r = client.post("/feedback", json={"outcomes": batch})
                if r.status_code != 200:
                    raise RuntimeError(f"POST /feedback answered {r.status_code}: {r.text[:300]}")
                with lock:
                    for k in ("accepted", "duplicates"):
                        sums[k] += r.json()[k]
                    sums["requests"] += 1

    parts = [batches[k::senders] for k in range(senders)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(senders) as pool:
        list(pool.map(send, parts))
    seconds = time.perf_counter() - t0
    return {**sums, "seconds": seconds, "per_s": len(outcomes) * copies / seconds}


def ingest(base: str, outcomes: list[dict], senders: int) -> dict[str, Any]:
    done = post_all(base, outcomes, senders)
    assert done["accepted"] == len(outcomes), done
    print(f"  ingest: {len(outcomes):,} outcomes in {done['seconds']:.2f} s = "
          f"{done['per_s']:,.0f}/s ({senders} senders)", flush=True)  # fmt: skip
    return done


def time_performance(base: str, repeats: int) -> dict[str, Any]:
    with httpx.Client(base_url=base, timeout=600) as client:
        seconds, rows = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = client.get("/performance")
            seconds.append(time.perf_counter() - t0)
            rows = r.json()["rows"]
    return {"median_s": statistics.median(seconds), "max_s": max(seconds), "rows": rows}


def metric(base: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base + "/metrics", timeout=30).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def table_count(url: str, table: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(f"select count(*) from {table}")).scalar_one())
    finally:
        engine.dispose()


def exact_counts(base: str, url: str, bodies: Path, outcomes: list[dict], args: Any) -> dict:
    """wrk on /predict while every batch of ``outcomes`` is posted twice; then the counts."""
    time.sleep(2.5)  # every worker's metrics reach the shared files within a second
    records_before = table_count(url, "iabma_audit_log")
    stored_before = table_count(url, "iabma_outcomes")
    predicted_before = metric(base, "iabma_http_requests_total", route="/predict", status="200")
    accepted_before = metric(base, "iabma_feedback_total", result="accepted")
    loaded: dict[str, Any] = {}
    wrk = threading.Thread(
        target=lambda: loaded.update(
            res=run_wrk(base + "/predict", bodies, args.wrk_connections, args.wrk_seconds)
        )
    )
    wrk.start()
    fed = post_all(base, outcomes, senders=4, copies=2)
    wrk.join()
    res = loaded["res"]
    time.sleep(2.5)  # every worker's metrics reach the shared files within a second
    predicted = metric(base, "iabma_http_requests_total", route="/predict", status="200")
    answered = int(predicted - predicted_before)
    records = table_count(url, "iabma_audit_log") - records_before
    stored = table_count(url, "iabma_outcomes") - stored_before
    counted = int(metric(base, "iabma_feedback_total", result="accepted") - accepted_before)
    checks = {
        "records == /predict answered 200 (server's count)": records == answered,
        "wrk's 2xx <= answered <= wrk's 2xx + connections": res.ok
        <= answered
        <= res.ok + args.wrk_connections,
        "accepted == outcomes == rows stored": fed["accepted"] == len(outcomes) == stored,
        "duplicates == outcomes (each batch sent twice)": fed["duplicates"] == len(outcomes),
        "iabma_feedback_total{accepted} == accepted": counted == fed["accepted"],
        "no failed request": res.failures == 0,
    }
    return {
        "wrk": {
            "req_per_s": res.req_per_s,
            "ok": res.ok,
            "failures": res.failures,
            "p99_ms": res.latency_ms["p99"],
        },
        "answered": answered,
        "records": records,
        "outcomes": len(outcomes),
        "accepted": fed["accepted"],
        "duplicates": fed["duplicates"],
        "stored": stored,
        "metric_accepted": counted,
        "feedback_per_s": fed["per_s"],
        "checks": checks,
        "exact": all(checks.values()),
    }


def markdown(r: dict[str, Any]) -> str:
    def med(runs: list[dict]) -> float:
        return statistics.median(x["per_s"] for x in runs)

    def each(runs: list[dict]) -> str:
        return ", ".join(f"{x['per_s']:,.0f}" for x in runs)

    sq, pg, perf, ex = r["sqlite_ingest"], r["postgres_ingest"], r["performance"], r["exact"]
    lines = [
        f"## feedback_speed {r['when']} ({r['machine']})",
        "",
        f"Trail of {r['records']:,} single-row records (SQLite), outcomes in batches of "
        f"{BATCH:,} for a random sample of them, in the order served; {r['rounds']} round(s), "
        "medians.",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        f"| ingest into SQLite (1 worker) >= {INGEST_TARGET:,.0f}/s | {med(sq):,.0f}/s "
        f"(rounds: {each(sq)}) | "
        f"{'yes' if med(sq) >= INGEST_TARGET else 'no'} |",
        f"| ingest into PostgreSQL (2 workers) >= {INGEST_TARGET:,.0f}/s | {med(pg):,.0f}/s "
        f"(rounds: {each(pg)}) | "
        f"{'yes' if med(pg) >= INGEST_TARGET else 'no'} |",
        f"| (worst case: in random order) | SQLite {r['sqlite_random']['per_s']:,.0f}/s, "
        f"PostgreSQL {r['postgres_random']['per_s']:,.0f}/s | |",
        f"| GET /performance, {r['records']:,} records and {perf['rows']:,} outcomes <= "
        f"{PERFORMANCE_TARGET_S:g} s | {perf['median_s']:.3f} s median (max {perf['max_s']:.3f})"
        f" | {'yes' if perf['median_s'] <= PERFORMANCE_TARGET_S else 'no'} |",
        f"| exact counts under wrk /predict (c{r['wrk_connections']}, {r['wrk_seconds']:g} s) "
        f"and feedback, PostgreSQL 2 workers | {ex['records']:,} records = {ex['answered']:,} "
        f"answered; {ex['accepted']:,} accepted = {ex['stored']:,} stored; "
        f"{ex['duplicates']:,} duplicates | {'yes' if ex['exact'] else 'NO'} |",
        "",
        f"Under that load: /predict {ex['wrk']['req_per_s']:,.0f} req/s (p99 "
        f"{ex['wrk']['p99_ms']:.1f} ms), feedback {ex['feedback_per_s']:,.0f} outcomes/s.",
    ]
    lines += [f"- {name}: {'yes' if ok else 'NO'}" for name, ok in ex["checks"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=REPO / "models_store")
    p.add_argument("--name", default="demo")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--outcomes", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--wrk-seconds", type=float, default=10.0)
    p.add_argument("--wrk-connections", type=int, default=16)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    if args.records < (args.rounds + 1) * args.outcomes:
        p.error("--records must hold (--rounds + 1) x --outcomes records with outcomes")
    procs.install_cleanup()
    wrk_binary()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="feedback-bench-") as tmp:
        work = Path(tmp)
        ctx, _ = prepare_bundle(args.store, args.name, work)
        url = f"sqlite:///{work / 'audit.db'}"
        t0 = time.perf_counter()
        info = seed(ctx.version_dir, url, args.records, args.days, rng, rows=1)
        print(f"SQLite trail: {args.records:,} records in {time.perf_counter() - t0:.0f} s")
        rounds, shuffled = plan_rounds(args.records, args.rounds, args.outcomes, rng)
        sqlite, performance = [], {}
        with serve(args.store, args.name, url, work) as base:
            for k, chosen in enumerate(rounds):
                sqlite.append(ingest(base, outcomes_for(chosen, info["classes"], rng), 2))
                if k == 0:
                    performance = time_performance(base, 5)
                    print(f"  GET /performance: {performance['median_s']:.3f} s median over "
                          f"{performance['rows']:,} outcomes", flush=True)  # fmt: skip
            print("  in random order:")
            sqlite_random = ingest(base, outcomes_for(shuffled, info["classes"], rng), 2)
        with fresh_schema() as pg:
            extra = 20_000
            n = (args.rounds + 1) * args.outcomes + extra
            t0 = time.perf_counter()
            seed(ctx.version_dir, pg, n, args.days, rng, rows=1)
            print(f"PostgreSQL trail: {n:,} records in {time.perf_counter() - t0:.0f} s")
            rounds, shuffled = plan_rounds(n - extra, args.rounds, args.outcomes, rng)
            postgres = []
            with serve(args.store, args.name, pg, work, workers=2) as base:
                for chosen in rounds:
                    postgres.append(ingest(base, outcomes_for(chosen, info["classes"], rng), 4))
                print("  in random order:")
                postgres_random = ingest(base, outcomes_for(shuffled, info["classes"], rng), 4)
                rest = outcomes_for(np.arange(n - extra, n), info["classes"], rng)
                exact = exact_counts(base, pg, ctx.bodies["native", 1], rest, args)
    result = {
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}",
        "records": args.records,
        "rounds": args.rounds,
        "wrk_seconds": args.wrk_seconds,
        "wrk_connections": args.wrk_connections,
        "sqlite_ingest": sqlite,
        "postgres_ingest": postgres,
        "sqlite_random": sqlite_random,
        "postgres_random": postgres_random,
        "performance": performance,
        "exact": exact,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"feedback_speed-{result['when'].replace(':', '')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    text = markdown(result)
    stem.with_suffix(".md").write_text(text)
    print("\n" + text + f"\nwritten: {stem}.json, {stem}.md")
    return 0 if exact["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
