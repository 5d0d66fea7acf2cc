"""What ``/predict``'s tail waits on while a SQLite trail is moved out: controls.

``bench/audit_size.py`` measures the p99 of single-row ``/predict`` under wrk idle and
while another process archives and prunes the trail. This runs the same pair with other
processes in the mover's place, each on a fresh copy of one seeded trail, in alternating
rounds, so that their ratios (during / idle) can be set side by side:

- ``none``: nothing (how far two idle loads differ);
- ``cpu``: a busy loop for :data:`CPU_S` s, about the mover's time here;
- ``disk``: :data:`BURST_MB` MB written beside the trail, then fsynced;
- ``write``: the archive's reads and Parquet files of the older half, checked, nothing
  deleted;
- ``prune``: retention's deletes of the older half;
- ``move``: the archive with ``--delete``, then prune (what audit_size runs).

    .venv/bin/python bench/trail_tail.py                       # 300k records, 2 rounds, ~8 min
    .venv/bin/python bench/trail_tail.py --kinds none,move --rounds 3

Figures go to ``<out>/trail_tail-<UTC>.json`` and ``.md``, and the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.speed.bundles import ensure_bundle  # noqa: E402
from bench.speed.report import write_results  # noqa: E402
from bench.speed.trail import SEED_HASH_KEY, seed, span  # noqa: E402
from bench.speed.trail_load import p99_while_moving  # noqa: E402

KINDS = ("none", "cpu", "disk", "write", "prune", "move")
CPU_S = 3.0
BURST_MB = 300


def part(kind: str, url: str) -> dict[str, float]:
    """One control, run in the mover's place (``--part``)."""
    from app.audit.lifecycle import archive
    from app.audit.lifecycle.retention import prune
    from app.audit.store.chain import chain_key
    from app.audit.store.engine import make_engine

    t0 = time.perf_counter()
    if kind == "cpu":
        while time.perf_counter() - t0 < CPU_S:
            pass
    elif kind == "disk":
        path = Path(url.removeprefix("sqlite:///")).with_suffix(".burst")
        with open(path, "wb") as fh:
            for _ in range(BURST_MB):
                fh.write(b"\0" * (1 << 20))
            fh.flush()
            os.fsync(fh.fileno())
        path.unlink()
    elif kind in ("write", "prune"):
        engine = make_engine(url, 30.0, mover=True)
        try:
            middle, _ = span(engine)
            key = chain_key(SEED_HASH_KEY)
            if kind == "prune":
                pruned = prune(engine, key, middle).records
                return {"records": pruned, "s": time.perf_counter() - t0}
            with tempfile.TemporaryDirectory(prefix="trail-tail-") as tmp:
                written, _ = archive.write(engine, middle, Path(tmp))
                assert archive.check(Path(tmp), key).intact
                return {"records": written.records, "s": time.perf_counter() - t0}
        finally:
            engine.dispose()
    return {"s": time.perf_counter() - t0}


def mover_argv(kind: str, url: str) -> list[str]:
    if kind == "move":
        return [sys.executable, str(REPO / "bench" / "audit_size.py"), "--move-out", url]
    if kind == "none":
        return [sys.executable, "-c", ""]
    return [sys.executable, str(Path(__file__).resolve()), "--part", kind, url]


def markdown(report: dict) -> str:
    lines = [
        f"`/predict` p99 under wrk at c{report['connections']}, {report['seconds']:g} s idle "
        f"then {report['seconds']:g} s with each control, on copies of one SQLite trail of "
        f"{report['records']:,} records ({report['started_utc']}; {report['rounds']} rounds):",
        "",
        "| control | p99 ratio, median | each round | idle p99 ms | during p99 ms | what it did |",
        "|---|--:|---|--:|--:|---|",
    ]
    for kind in report["kinds"]:
        runs = [r for r in report["runs"] if r["kind"] == kind]
        ratios = [r["p99_ratio"] for r in runs]
        did = ", ".join(
            f"{k} {v:,.2f}" if v < 100 else f"{k} {v:,.0f}"
            for k, v in runs[-1]["move_out"].items()
            if isinstance(v, float | int)
        )
        lines.append(
            f"| {kind} | {statistics.median(ratios):.2f} | "
            + " / ".join(f"{x:.2f}" for x in ratios)
            + f" | {statistics.median(r['idle']['p99'] for r in runs):.2f} "
            f"| {statistics.median(r['during']['p99'] for r in runs):.2f} | {did} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--kinds", default=",".join(KINDS), help="comma list of " + ", ".join(KINDS))
    p.add_argument("--connections", type=int, default=2, help="wrk connections")
    p.add_argument("--seconds", type=float, default=10.0, help="each load")
    p.add_argument("--store", type=Path, default=REPO / "models_store")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--part", nargs=2, metavar=("KIND", "URL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        print(json.dumps(part(*args.part)), flush=True)
        return
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or args.rounds < 1:
        p.error(f"--kinds takes {', '.join(KINDS)} (got {unknown}); --rounds at least 1")
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {"benchmark": "trail_tail", "started_utc": started, "records": args.records,
              "rounds": args.rounds, "kinds": kinds, "connections": args.connections,
              "seconds": args.seconds, "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="trail-tail-") as tmp:
        work = Path(tmp)
        keep = work / "seeded.db"
        seed(ensure_bundle(args.store, "demo"), f"sqlite:///{keep}", args.records, 30,
             np.random.default_rng(0), rows=1)  # fmt: skip
        for r in range(args.rounds):
            for kind in kinds:
                trail = work / f"trail-{r}-{kind}.db"
                shutil.copyfile(keep, trail)
                url = f"sqlite:///{trail}"
                got = p99_while_moving(
                    args.store, url, work, args.seconds, args.connections, warmup=2.0,
                    mover=mover_argv(kind, url),
                )  # fmt: skip
                report["runs"].append({"round": r, "kind": kind, **got})
                idle, during = got["idle"]["p99"], got["during"]["p99"]
                ratio = got["p99_ratio"]
                print(f"round {r} {kind:<6} p99 {idle:.2f} -> {during:.2f} ms ({ratio:.2f}x)")
                for leftover in work.glob(f"{trail.name}*"):
                    leftover.unlink()
    write_results(args.out, f"trail_tail-{started}", report, markdown(report))


if __name__ == "__main__":
    main()
